"""Run every `benches/bench_*.py` in turn, each in its own interpreter, and print its output.

    .venv/bin/python benches/run_all.py [--quick] [name-filter ...]

`make bench` runs this. Benchmarks print figures and ratios; nothing here asserts on time.
Each runs as a subprocess so that one benchmark's allocations, page cache or engine threads
cannot colour the next one's figures, and so that one failing benchmark does not hide the
others (the exit status is non-zero if any failed).

`--quick` is passed through to the benchmarks that accept it (those whose source handles a
`--quick` argument); the others run with their defaults. Extra arguments select benchmarks
whose file name contains one of them (`run_all.py move access`).
"""
from __future__ import annotations

import pathlib
import subprocess
import sys
import time

BENCHES = pathlib.Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    filters = [a for a in argv if not a.startswith("-")]
    scripts = sorted(p for p in BENCHES.glob("bench_*.py")
                     if not filters or any(f in p.name for f in filters))
    failed: list[str] = []
    for script in scripts:
        args = [sys.executable, str(script)]
        if quick and "--quick" in script.read_text(encoding="utf-8"):
            args.append("--quick")
        print(f"===== {script.name}{' --quick' if args[-1] == '--quick' else ''}", flush=True)
        start = time.perf_counter()
        # Output goes straight to ours (not captured), so long benchmarks show progress.
        status = subprocess.run(args, cwd=BENCHES.parent).returncode
        elapsed = time.perf_counter() - start
        print(f"----- {script.name}: {'ok' if status == 0 else f'FAILED (exit {status})'} "
              f"in {elapsed:.1f} s\n", flush=True)
        if status != 0:
            failed.append(script.name)
    if failed:
        print(f"run_all: {len(failed)} of {len(scripts)} benchmarks failed: {', '.join(failed)}")
        return 1
    print(f"run_all: {len(scripts)} benchmarks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
