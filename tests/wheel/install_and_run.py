"""`make wheel-test`: install the built wheel into a fresh venv and run the demo there.

    python tests/wheel/install_and_run.py target/wheels

Checks what a user of the wheel gets: the metadata (LICENSE, README long description,
`Typing :: Typed`, classifiers through 3.13, no placeholder Project-URLs, the ray extra's
compatible-release pin, keywords), a stripped extension, `py.typed` and
`_native.pyi`, and that examples/demo.py runs against the installed package, from a directory
outside the source tree. Runs with the interpreter running this script, and also with
python3.12 and python3.13 where installed (issues 13 and 26); a missing one is a printed skip.
"""
import email
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fail(message: str) -> None:
    sys.exit(f"wheel-test: {message}")


def elf_sections(image: bytes) -> set[str]:
    """Section names of a little-endian ELF64 image (the string table names them)."""
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        fail("the extension is not a little-endian ELF64 file")
    shoff = int.from_bytes(image[0x28:0x30], "little")
    shentsize = int.from_bytes(image[0x3A:0x3C], "little")
    shnum = int.from_bytes(image[0x3C:0x3E], "little")
    shstrndx = int.from_bytes(image[0x3E:0x40], "little")

    def header(k: int) -> tuple[int, int, int]:
        base = shoff + k * shentsize
        name = int.from_bytes(image[base:base + 4], "little")
        offset = int.from_bytes(image[base + 0x18:base + 0x20], "little")
        size = int.from_bytes(image[base + 0x20:base + 0x28], "little")
        return name, offset, size

    _, str_off, str_size = header(shstrndx)
    table = image[str_off:str_off + str_size]
    names = set()
    for k in range(shnum):
        start = header(k)[0]
        names.add(table[start:table.index(b"\0", start)].decode())
    return names


def check_wheel(wheel: pathlib.Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(info))
        so_name = next((n for n in names if n.startswith("strideweave/_native") and n.endswith(".so")), None)
        if so_name is None:
            fail("the wheel has no strideweave/_native*.so")
        so = archive.read(so_name)
    for needed in ("strideweave/py.typed", "strideweave/_native.pyi"):
        if needed not in names:
            fail(f"{needed} is missing from the wheel")
    if not any(n.endswith("LICENSE") for n in names):
        fail("LICENSE is missing from the wheel")
    classifiers = metadata.get_all("Classifier") or []
    if "Typing :: Typed" not in classifiers:
        fail(f"no 'Typing :: Typed' classifier in {classifiers}")
    # No URL at all is better than one that sends users nowhere (issue 26).
    if any(".invalid" in url for url in metadata.get_all("Project-URL") or []):
        fail(f"placeholder Project-URL in the metadata: {metadata.get_all('Project-URL')}")
    for version in ("3.11", "3.12", "3.13"):
        if f"Programming Language :: Python :: {version}" not in classifiers:
            fail(f"no classifier for Python {version} in {classifiers}")
    if not any(req.replace(" ", "").startswith("ray~=2.60;") for req in metadata.get_all("Requires-Dist") or []):
        fail(f"the ray extra is not a compatible-release pin: {metadata.get_all('Requires-Dist')}")
    if not metadata.get("Keywords"):
        fail("no Keywords in the metadata")
    if not str(metadata.get("Description-Content-Type", "")).startswith("text/markdown") \
            or "make demo" not in metadata.get_payload():
        fail("the README is not the long description")
    if metadata.get("License-Expression", metadata.get("License")) != "Apache-2.0":
        fail(f"license metadata is {metadata.get('License-Expression')!r}")
    if "manylinux_2_28_x86_64" not in wheel.name:
        fail(f"{wheel.name} is not tagged manylinux_2_28")
    sections = elf_sections(so)
    if ".symtab" in sections or any(name.startswith(".debug") for name in sections):
        fail(f"{so_name} is not stripped: sections {sorted(sections)}")
    print(f"wheel-test: {wheel.name}: metadata ok, {so_name} stripped, {len(so) / 1e6:.2f} MB")


def runs(candidate: str | None) -> bool:
    # pyenv puts shims on PATH for versions it does not have; they exit 127.
    return candidate is not None and subprocess.run(
        [candidate, "-c", "import venv"], capture_output=True).returncode == 0


def interpreters() -> list[str]:
    """The interpreter running this script, plus python3.12 and python3.13 where installed
    (the classifiers claim them). A missing one is said, never downloaded."""
    found = [sys.executable]
    for version in ("3.12", "3.13"):
        candidate = shutil.which(f"python{version}")
        if runs(candidate) and sys.version_info[:2] != tuple(int(p) for p in version.split(".")):
            assert candidate is not None
            found.append(candidate)
        elif sys.version_info[:2] != tuple(int(p) for p in version.split(".")):
            print(f"wheel-test: skipping Python {version}: no python{version} interpreter on this machine")
    return found


def install_and_run(wheel: pathlib.Path, python: str, numpy_pin: str) -> None:
    with tempfile.TemporaryDirectory(prefix="sw-wheel-") as tmp:
        venv = pathlib.Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        py = str(venv / "bin" / "python")
        subprocess.run([py, "-m", "pip", "install", "--quiet", str(wheel.resolve()), numpy_pin], check=True)
        demo = pathlib.Path(tmp) / "demo.py"
        shutil.copy(ROOT / "examples" / "demo.py", demo)
        where = subprocess.run([py, "-c", "import strideweave, sys; print(strideweave.__file__, sys.version.split()[0])"],
                               cwd=tmp, check=True, capture_output=True, text=True).stdout.split()
        if not where[0].startswith(str(venv)):
            fail(f"the fresh venv imported strideweave from {where[0]}, not from the wheel")
        print(f"wheel-test: installed into a fresh Python {where[1]} venv; running the demo")
        subprocess.run([py, str(demo)], cwd=tmp, check=True)


def main() -> None:
    wheel_dir = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/wheels")
    wheels = sorted(wheel_dir.glob("strideweave-*.whl"))
    if len(wheels) != 1:
        fail(f"expected one wheel in {wheel_dir}, found {[w.name for w in wheels]}")
    check_wheel(wheels[0])
    numpy_pin = next(line for line in (ROOT / "requirements-demo.txt").read_text().splitlines()
                     if line.startswith("numpy=="))
    for python in interpreters():
        install_and_run(wheels[0], python, numpy_pin)
    print("wheel-test: ok")


if __name__ == "__main__":
    main()
