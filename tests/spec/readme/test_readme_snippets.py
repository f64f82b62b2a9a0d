"""Issue 26: every code block in README.md runs, so a snippet cannot rot.

Every ```python block is run as pasted, each in a fresh interpreter in an empty directory
(a reader pastes one block at a time); a block that imports Ray runs where Ray is installed
(`make test` installs it) and is skipped otherwise. Blocks are found by their fence, so a
section added later is picked up without touching this file. Every ```sh block is checked
without running it (the commands build, install or need root): each `make X` it names is a
target of the Makefile and each repository path it names exists."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(?P<lang>[A-Za-z0-9_+-]*)\n(?P<body>.*?)^```\s*$", re.M | re.S)
BOUND = 300  # seconds; a safety net against a hung block (Ray's start-up), not a speed check


def blocks(lang: str) -> list[tuple[int, str]]:
    """(line number, body) of every fenced block of `lang` in README.md."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m["body"])
            for m in FENCE.finditer(text) if m["lang"] == lang]


def test_the_readme_has_python_blocks_and_only_known_languages():
    text = README.read_text(encoding="utf-8")
    langs = {m["lang"] for m in FENCE.finditer(text)}
    # An unlabelled or other-language block would escape both runners below.
    assert langs <= {"python", "sh"}, langs
    assert len(blocks("python")) >= 3


@pytest.mark.parametrize("line,body", blocks("python"), ids=[f"README.md:{n}" for n, _ in blocks("python")])
def test_python_block_runs_as_pasted(line, body, tmp_path):
    if re.search(r"^\s*(import ray\b|from ray\b)|^import .*\bray\b", body, re.M) \
            and importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (pip install -r requirements-ray.txt)")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, (f"README.md block at line {line} failed:\n{body}\n"
                                  f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}")


def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][A-Za-z0-9_-]*):", makefile, re.M))


@pytest.mark.parametrize("line,body", blocks("sh"), ids=[f"README.md:{n}" for n, _ in blocks("sh")])
def test_sh_block_names_real_targets_and_paths(line, body):
    targets = make_targets()
    for target in re.findall(r"\bmake ([a-z][a-z0-9-]*)", body):
        assert target in targets, f"README.md:{line}: `make {target}` is not a Makefile target"
    for path in re.findall(r"(?:\.venv/bin/\S+ )?\b((?:tests|benches|docs|examples)/[\w./-]+\.py)", body):
        assert (ROOT / path).is_file(), f"README.md:{line}: {path} does not exist"
