"""The Rust core's object model (strideweave_core::model) against plain Rust, side by side.

Runs `cargo run --release -p strideweave-core --example bench_model`, which prints each
figure next to what a Rust user would otherwise write (Vec clone, slice index, std::fs write)
and their ratio. Nothing here asserts on time. `--quick` shortens every measurement.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    args = ["cargo", "run", "--quiet", "--release", "-p", "strideweave-core", "--example", "bench_model"]
    if "--quick" in argv:
        args += ["--", "--quick"]
    return subprocess.run(args, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
