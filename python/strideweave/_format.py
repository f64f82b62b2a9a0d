"""NumPy-style text of a Tensor's values, for `str(tensor)`.

The values are shown over the tensor's leaf modes (`tensor.shape`), axis 0 outermost, exactly
as `np.asarray(tensor)` would print them. Like NumPy, a tensor with more than `THRESHOLD`
elements is summarised: along every axis longer than `2 * EDGE_ITEMS` only the first and
last `EDGE_ITEMS` entries are shown, with `...` between. Only the shown elements are read,
so printing a large FileBacked or block-device tensor stays cheap.

Floats are printed positionally, lined up on the decimal point; NumPy's switch to scientific
notation for wide value ranges is not mirrored.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Sequence

__all__ = ["format_values", "THRESHOLD", "EDGE_ITEMS"]

THRESHOLD = 1000  # numpy.get_printoptions()["threshold"]
EDGE_ITEMS = 3  # numpy.get_printoptions()["edgeitems"]


def _shown(extent: int, summarise: bool) -> list[int | None]:
    """The indices shown along one axis; None marks the elided middle."""
    if summarise and extent > 2 * EDGE_ITEMS:
        return [*range(EDGE_ITEMS), None, *range(extent - EDGE_ITEMS, extent)]
    return list(range(extent))


def _element_text(value: Any, float32: bool) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if float32 and math.isfinite(value):
            # The shortest decimal that round-trips through binary32, as NumPy prints float32
            # (the stored value is a float32 widened to a Python float).
            for digits in range(1, 10):
                shortest = float(f"{value:.{digits}g}")
                if _round_f32(shortest) == value:
                    value = shortest
                    break
        text = repr(value)
        return text[:-1] if text.endswith(".0") else text  # NumPy's "1." for 1.0
    return str(value)


def _round_f32(x: float) -> float:
    import struct
    return struct.unpack("f", struct.pack("f", x))[0]


def format_values(shape: Sequence[int], read: Callable[[tuple[int, ...]], Any], float32: bool) -> str:
    """The NumPy-like text of the values `read(leaf_coordinate)` over `shape`."""
    summarise = math.prod(shape) > THRESHOLD
    axes = [_shown(n, summarise) for n in shape]
    texts: dict[tuple[int, ...], str] = {}
    for coordinate in itertools.product(*[[i for i in axis if i is not None] for axis in axes]):
        texts[coordinate] = _element_text(read(coordinate), float32)
    if texts and all("." in t and "e" not in t for t in texts.values()):
        # Positional floats line up on the decimal point, as NumPy aligns them.
        parts = {k: t.split(".") for k, t in texts.items()}
        whole = max(len(p[0]) for p in parts.values())
        frac = max(len(p[1]) for p in parts.values())
        texts = {k: p[0].rjust(whole) + "." + p[1].ljust(frac) for k, p in parts.items()}
    width = max((len(t) for t in texts.values()), default=0)

    def render(depth: int, prefix: tuple[int, ...]) -> str:
        if depth == len(shape):
            return texts[prefix].rjust(width)
        parts = ["..." if i is None else render(depth + 1, prefix + (i,)) for i in axes[depth]]
        if depth == len(shape) - 1:
            return "[" + " ".join(parts) + "]"
        separator = "\n" * (len(shape) - depth - 1) + " " * (depth + 1)
        return "[" + separator.join(parts) + "]"

    return render(0, ())
