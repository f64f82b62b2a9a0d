"""Calls every `_native` function and storage/handle method with hostile integers and
objects, many thousands of times. Run as a script (by test_native_fuzz.py, in a child process
and a scratch directory) so that a crash fails the test with its output instead of killing
the test run. Exceptions are the expected outcome; only a crash or a hang is a failure.

Excluded, with reasons:
- `HostStorage.wrap(kind, pointer, count)`: the one entry that takes an address by design: it
  backs `CPU(size, pointer=...)`, whose contract (tensor-and-carriers.md) makes the caller
  vouch for the memory. It cannot check what it is given.
- `AwaitResult.wait`, `result`, `exception` and `_join`: blocking on a pending handle is their
  job (a hostile timeout such as 2**62 seconds is a valid, practically endless wait).
- `Layout`/`Shape`/`Stride` methods: safe Rust with no `unsafe`; their constructors are fuzzed.
"""
from __future__ import annotations

import os
import random
import sys
import tempfile

from strideweave import _native
from strideweave.layout import Layout, Shape, Stride

INTS = [-1, 0, 1, 2, 3, 7, 64, 4096, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64, -2**63,
        -2**63 - 1, -4096]
KINDS = ["f32", "f64", "i32", "bool", "x", ""]


def pool(tmp: str, serial: int) -> list:
    """Fresh hostile arguments for one call (storages are made per call so one call's
    release or resize cannot turn the next into a long job)."""
    released = _native.HostStorage("f32", 8)
    released.release()
    file_storage = _native.FileStorage(os.path.join(tmp, f"f{serial}.bin"), "f32")
    file_storage.resize(16)
    pending = _native.new_completion(_native.AwaitResult)
    done = _native.new_completion(_native.AwaitResult)
    done._succeed(1)
    return INTS + KINDS + [
        None, object(), float("nan"), float("inf"), -0.0, 1.5, True, b"\x00" * 8, bytearray(8),
        [], [1], [-1], [2**64], [1, 2, 3], [0, 0], [3, 2**62], (1, 2), {"a": 1}, "add", "mul",
        _native.HostStorage("f32", 16), _native.HostStorage("i32", 0), _native.HostStorage("f64", 3),
        released, file_storage, pending, done, lambda *a, **k: None,
        Layout(Shape([4]), Stride([1])), Layout(Shape([2, 2]), Stride([0, 1])),
        Layout(Shape([3]), Stride([2**40])), Shape([2]), Stride([1]),
    ]


def targets() -> list:
    """(name, callable factory) for everything fuzzed."""
    found = []
    for name in sorted(dir(_native)):
        obj = getattr(_native, name)
        if name.startswith("__") or isinstance(obj, type) or not callable(obj):
            continue
        found.append((name, lambda obj=obj, **_: obj))
    def host(**_):
        return _native.HostStorage("f32", 8)

    def file(tmp, serial, **_):
        s = _native.FileStorage(os.path.join(tmp, f"t{serial}.bin"), "i32")
        s.resize(8)
        return s

    def completion(**_):
        return _native.new_completion(_native.AwaitResult)

    for cls_name, factory, skip in (("HostStorage", host, {"wrap"}), ("FileStorage", file, set()),
                                    ("AwaitResult", completion, {"wait", "result", "exception", "_join"})):
        cls = getattr(_native, cls_name)
        for meth in sorted(m for m in dir(cls) if not m.startswith("__") and m not in skip):
            if callable(getattr(cls, meth)):
                found.append((f"{cls_name}.{meth}",
                              lambda factory=factory, meth=meth, **kw: getattr(factory(**kw), meth)))
    # The native bases: their field setters and element access, on fresh (unset) instances
    # and on instances the fuzzer may already have given a hostile view.
    bases = {"_TensorBase": _native._TensorBase(), "_CarrierBase": _native._CarrierBase()}
    for cls_name, instance in bases.items():
        for meth in ("_sw_init_view", "_sw_init_multi", "_is_multi", "__getitem__", "__setitem__",
                     "__dlpack__", "__dlpack_device__", "__setattr__", "__getstate__"):
            if hasattr(instance, meth):
                found.append((f"{cls_name}.{meth}", lambda instance=instance, meth=meth, **_: getattr(instance, meth)))
                found.append((f"{cls_name}().{meth}",
                              lambda cls_name=cls_name, meth=meth, **_: getattr(getattr(_native, cls_name)(), meth)))
    # The move request's checks take any objects: hostile ones fail a row of the table.
    found.append(("MoveRequest.check", lambda **_: _native.MoveRequest.check))
    for cls_name in ("HostStorage", "FileStorage", "BlockDeviceHandle", "Layout", "Shape", "Stride",
                     "_TensorBase", "_CarrierBase", "MoveRequest"):
        found.append((cls_name, lambda cls_name=cls_name, **_: getattr(_native, cls_name)))
    return found


LENGTH_INTS = [0, 1, 2, 3, 7, 2**31 - 1, 2**32, 2**62, 2**63 - 1, -1, -2**63]


def hostile_list(rng: random.Random, rank: int) -> list:
    """A list of `rank` items, or one of another length: the mismatch family (issue 22.5)."""
    length = rank if rng.random() < 0.4 else rng.choice([0, 1, 2, 3, 5, rank + 1, max(rank - 1, 0)])
    return [rng.choice(LENGTH_INTS) if rng.random() < 0.3 else rng.randrange(0, 4) for _ in range(length)]


def mismatch_call(rng: random.Random, tmp: str, serial: int):
    """(name, callable, args) whose list arguments disagree in length, or whose sizes are
    negative or beyond memory: every entry point taking several lists or a count."""
    rank = rng.randrange(0, 4)
    ext = hostile_list(rng, rank)
    f32 = _native.HostStorage("f32", 64)
    out = _native.HostStorage("f32", 64)
    operand = (f32, rng.choice([0, 0, 1, 63, 64, 2**63 - 1]), hostile_list(rng, rank))
    other = (_native.HostStorage("f32", 64), 0, hostile_list(rng, rank))
    file_storage = _native.FileStorage(os.path.join(tmp, f"m{serial}.bin"), "f32")
    file_storage.resize(16)
    size = rng.choice(LENGTH_INTS)
    choices = [
        ("sum_f32", _native.sum_f32, (ext, operand)),
        ("binary_f32", _native.binary_f32, (rng.choice(["add", "mul"]), ext, operand, other, out,
                                            hostile_list(rng, rank))),
        ("unary_f32", _native.unary_f32, (rng.choice(["copy", "scatter_add"]), ext, operand, out,
                                          hostile_list(rng, rank))),
        ("copy_layout", _native.copy_layout, (f32, 0, out, 0, ext, hostile_list(rng, rank))),
        ("copy_blocks", _native.copy_blocks, ([(f32, 0, out, 0)], hostile_list(rng, rank),
                                              hostile_list(rng, rank), hostile_list(rng, rank))),
        ("submit_place_blocks", _native.submit_place_blocks,
         ([f32, f32], out, hostile_list(rng, 2), hostile_list(rng, rank), hostile_list(rng, rank), lambda e: None)),
        ("copy_storages", _native.copy_storages, ([f32, f32], [out], size)),
        ("HostStorage.many", _native.HostStorage.many, ("f32", rng.choice([0, 1, size]), size)),
        ("HostStorage", _native.HostStorage, ("f32", size)),
        ("FileStorage.resize", file_storage.resize, (size,)),
        ("FileSlab.allocate", _native.FileSlab(os.path.join(tmp, f"s{serial}.slab"), "f32", 4).allocate, (size,)),
    ]
    return rng.choice(choices)


def run_mismatch_family(rng: random.Random, tmp: str, rounds: int) -> int:
    """The structured family: hostile values in the right places, so the checks past the
    argument conversion are reached. Exceptions are expected; a panic (PanicException is a
    BaseException) or an abort fails the run."""
    calls = 0
    for serial in range(rounds):
        name, fn, args = mismatch_call(rng, tmp, serial)
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - refusing hostile input is the expected outcome
            pass
        except BaseException as e:
            raise SystemExit(f"{name}{args!r} raised {type(e).__name__}: {e}") from e
        calls += 1
    return calls


def limit_address_space() -> None:
    """Caps this process at 8 GiB of address space, so an allocation sized by an argument
    that is not fallible aborts the run instead of passing on a machine with swap."""
    import resource
    limit = 8 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(seed: int, rounds: int) -> int:
    rng = random.Random(seed)
    calls = 0
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # a constructor given a hostile path creates files only in here
        calls += run_mismatch_family(rng, tmp, rounds // 2)
        for serial in range(rounds):
            name, factory = rng.choice(TARGETS)
            try:
                fn = factory(tmp=tmp, serial=serial)
            except Exception:  # noqa: BLE001
                continue
            args = pool(tmp, serial)
            call = [rng.choice(args) for _ in range(rng.randrange(0, 10))]
            if rng.random() < 0.3:
                call = call[:rng.randrange(0, len(call) + 1)]
            try:
                fn(*call)
            except Exception:  # noqa: BLE001 - refusing hostile input is the expected outcome
                pass
            calls += 1
    print(f"fuzzed {calls} calls over {len(TARGETS)} targets")
    return 0


TARGETS = targets()

if __name__ == "__main__":
    if "--rlimit-as" in sys.argv:
        limit_address_space()
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2])))
