"""Draw the README's layout picture: a hierarchical layout mapped onto slots (docs/layout.svg).

    .venv/bin/python docs/draw_layout.py [out.svg]

The layout is `[[2,2],[2,2]]:[[1,4],[2,8]]`: a 4x4 matrix whose rows and columns are each split
into (inside a 2x2 tile, which tile). Every slot number in the picture is computed by
strideweave itself (`layout(k)` for the k-th coordinate, first mode fastest), so the picture
cannot drift from what the library does. Plain SVG written by hand: no plotting dependency.
"""
from __future__ import annotations

import pathlib
import sys

import strideweave as sw

HERE = pathlib.Path(__file__).resolve().parent
LAYOUT = sw.Layout(sw.Shape([[2, 2], [2, 2]]), sw.Stride([[1, 4], [2, 8]]))
TILE_COLOURS = ["#8ecae6", "#ffb703", "#90be6d", "#f28482"]
CELL = 44


def tile_of(row: int, col: int) -> int:
    return (row // 2) + 2 * (col // 2)


def svg() -> str:
    rows = cols = 4
    parts: list[str] = []
    add = parts.append
    width, height = 760, 330
    add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">')
    add(f'<rect width="{width}" height="{height}" fill="white"/>')
    add('<text x="20" y="28" font-size="17" font-weight="bold">Layout [[2,2],[2,2]] : [[1,4],[2,8]]'
        '</text>')
    add('<text x="20" y="50" font-size="13" fill="#444">coordinate (row, col) = ((r0, r1), (c0, c1))'
        ' → slot r0·1 + r1·4 + c0·2 + c1·8</text>')
    x0, y0 = 60, 90
    add(f'<text x="{x0}" y="{y0 - 12}" font-size="13">tensor coordinates (4×4, 2×2 tiles)</text>')
    slot_tile: dict[int, int] = {}
    for r in range(rows):
        add(f'<text x="{x0 - 18}" y="{y0 + r * CELL + 27}" font-size="12" fill="#666">{r}</text>')
        for c in range(cols):
            slot = LAYOUT(r + rows * c)  # the k-th coordinate, first mode fastest
            tile = tile_of(r, c)
            slot_tile[slot] = tile
            x, y = x0 + c * CELL, y0 + r * CELL
            add(f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{TILE_COLOURS[tile]}" '
                f'stroke="#333" stroke-width="1"/>')
            add(f'<text x="{x + CELL / 2}" y="{y + 27}" font-size="15" text-anchor="middle">{slot}</text>')
    for c in range(cols):
        add(f'<text x="{x0 + c * CELL + 18}" y="{y0 + rows * CELL + 18}" font-size="12" fill="#666">{c}</text>')
    for k in (2,):  # the tile boundaries
        add(f'<line x1="{x0}" y1="{y0 + k * CELL}" x2="{x0 + cols * CELL}" y2="{y0 + k * CELL}" '
            'stroke="#000" stroke-width="3"/>')
        add(f'<line x1="{x0 + k * CELL}" y1="{y0}" x2="{x0 + k * CELL}" y2="{y0 + rows * CELL}" '
            'stroke="#000" stroke-width="3"/>')
    # the carrier's slots, one row, same colours: each 2x2 tile lands on slots of its own colour
    sx, sy, sw_ = 300, 150, 27
    add(f'<text x="{sx}" y="{sy - 14}" font-size="13">carrier slots 0..15 (what the layout '
        'addresses)</text>')
    for slot in range(LAYOUT.cosize):
        x = sx + slot * sw_
        add(f'<rect x="{x}" y="{sy}" width="{sw_}" height="{sw_ + 6}" '
            f'fill="{TILE_COLOURS[slot_tile[slot]]}" stroke="#333" stroke-width="1"/>')
        add(f'<text x="{x + sw_ / 2}" y="{sy + 21}" font-size="12" text-anchor="middle">{slot}</text>')
    add(f'<text x="{sx}" y="{sy + 70}" font-size="13" fill="#444">Each cell shows the slot its '
        'coordinate maps to.</text>')
    add(f'<text x="{sx}" y="{sy + 90}" font-size="13" fill="#444">Strides 1 and 2 inside a tile, '
        '4 and 8 between tiles:</text>')
    add(f'<text x="{sx}" y="{sy + 110}" font-size="13" fill="#444">each 2x2 tile is 4 consecutive '
        'slots (a blocked layout),</text>')
    add(f'<text x="{sx}" y="{sy + 130}" font-size="13" fill="#444">while t[r, c] still addresses '
        'the 4x4 matrix.</text>')
    add('</svg>')
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> None:
    out = pathlib.Path(argv[0]) if argv else HERE / "layout.svg"
    out.write_text(svg(), encoding="utf-8")
    print(f"draw_layout: wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
