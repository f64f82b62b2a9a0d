"""Every public enum of the Rust core is `#[non_exhaustive]` (issue 25, semver hygiene): a
variant added later is not a breaking change for a crate that matches on it. Read from the
sources, so a new enum without the attribute fails here."""
import pathlib
import re

CORE = pathlib.Path(__file__).resolve().parents[2] / "crates" / "strideweave-core" / "src"
ENUM = re.compile(r"^pub enum (\w+)", re.M)


def attributes_above(lines, index):
    """The attribute and doc lines directly above line `index`."""
    out = []
    k = index - 1
    while k >= 0 and (lines[k].startswith("#[") or lines[k].startswith("///")):
        out.append(lines[k])
        k -= 1
    return out


def test_every_public_enum_of_the_core_is_non_exhaustive():
    missing = []
    seen = 0
    for path in sorted(CORE.rglob("*.rs")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = ENUM.match(line)
            if m:
                seen += 1
                if "#[non_exhaustive]" not in attributes_above(lines, i):
                    missing.append(f"{path.relative_to(CORE)}: {m.group(1)}")
    assert seen > 10, "the scan found the core's enums"
    assert missing == []
