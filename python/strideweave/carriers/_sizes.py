"""The one rule for storage sizes too large to represent (README, "Sizes").

A carrier of `size` slots needs `size * slot_bytes` bytes of memory or file. Above 2**63 - 1
bytes (the largest object a 64-bit process can address, and the largest file offset) no
system could provide it, so every constructor and factory of the built-in carriers raises
`OverflowError` naming the argument and the size, before anything is allocated or created.
A representable size the system cannot supply is a different failure: MemoryError for host
memory, OSError (ENOSPC, EFBIG) for files, MemoryError ("no room") on a block device.
"""
from __future__ import annotations

import sys

__all__: list[str] = []

MAX_STORAGE_BYTES = sys.maxsize  # 2**63 - 1 on the 64-bit platforms strideweave supports

# Bytes per slot of each Rust storage kind (carriers.dtype.STORAGE_KIND values).
KIND_BYTES = {"f32": 4, "i32": 4, "f64": 8, "bool": 1}

# The bytes one slot of a Generic carrier costs: one object pointer in its list.
GENERIC_SLOT_BYTES = 8


def check_storage_size(owner: str, size: int, slot_bytes: int, name: str = "size") -> int:
    """`size` (an int already checked non-negative) if `size * slot_bytes` is representable;
    else OverflowError naming `owner` (the class or call), `name` and the size."""
    if size * slot_bytes > MAX_STORAGE_BYTES:
        raise OverflowError(f"{owner} {name} {size} is too large: {size} slots of {slot_bytes} "
                            f"bytes exceed the {MAX_STORAGE_BYTES}-byte limit of any storage")
    return size
