"""Draw the README's benchmark plot (docs/bench.svg) from saved `make bench` output.

    make bench | tee docs/bench-output.txt  # the full run: the checked-in plot is drawn from it
    .venv/bin/python docs/plot_benches.py docs/bench-output.txt [out.svg] [--caption TEXT]

Reads the side-by-side rows the benches print and draws ours next to what a user would
otherwise call, in milliseconds (shorter is better):
- bench_move.py rows: `<label> ours X ms (...) <numpy|...> Y ms (...) ratio R`;
- bench_ray.py rows: `ray.put + ray.get + ndarray.copy()  Y ms` against
  `strideweave move into a fresh CPU carrier  X ms`.
Plain SVG written by hand: no plotting dependency.
"""
from __future__ import annotations

import pathlib
import re
import sys
from html import escape

HERE = pathlib.Path(__file__).resolve().parent
MOVE_ROW = re.compile(r"^\s+(?P<label>\S.*?)\s+ours\s+(?P<ours>[0-9.]+) ms \([^)]*\)\s+"
                      r"(?P<theirs_name>\S+)\s+(?P<theirs>[0-9.]+) ms")
SECTION = re.compile(r"^ ?(?P<mib>\d+) MiB \(")
RAY_THEIRS = re.compile(r"^\s+ray\.put \+ ray\.get \+ ndarray\.copy\(\)\s+(?P<ms>[0-9.]+) ms")
RAY_OURS = re.compile(r"^\s+strideweave move into a fresh CPU carrier\s+(?P<ms>[0-9.]+) ms")
RAY_HEAD = re.compile(r"^(?P<mib>\d+) MiB CPU -> Ray -> CPU")


def rows_of(text: str) -> list[tuple[str, float, str, float]]:
    """(label, ours ms, their name, their ms) for every side-by-side row found."""
    rows: list[tuple[str, float, str, float]] = []
    section = ""
    ray_theirs: float | None = None
    ray_mib = ""
    for line in text.splitlines():
        if (m := SECTION.match(line)) is not None:
            section = f"{m['mib']} MiB "
        elif (m := MOVE_ROW.match(line)) is not None:
            rows.append((section + m["label"], float(m["ours"]), m["theirs_name"], float(m["theirs"])))
        elif (m := RAY_HEAD.match(line)) is not None:
            ray_mib = f"{m['mib']} MiB "
        elif (m := RAY_THEIRS.match(line)) is not None:
            ray_theirs = float(m["ms"])
        elif (m := RAY_OURS.match(line)) is not None and ray_theirs is not None:
            rows.append((ray_mib + "CPU → Ray → CPU", float(m["ms"]), "ray.put+get+copy", ray_theirs))
    return rows


def svg(rows: list[tuple[str, float, str, float]], caption: str) -> str:
    bar, gap, left, right = 13, 14, 270, 220
    width = 900
    lines = caption.split("; ")
    height = 70 + len(rows) * (2 * bar + gap) + 20 + 18 * len(lines)
    top = max([r[1] for r in rows] + [r[3] for r in rows] + [1e-9])
    scale = (width - left - right) / top
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             '<text x="20" y="26" font-size="16" font-weight="bold">strideweave against what you would '
             'otherwise call (ms, shorter is better)</text>',
             f'<rect x="{left}" y="38" width="12" height="12" fill="#219ebc"/>'
             f'<text x="{left + 18}" y="49" font-size="12">strideweave</text>'
             f'<rect x="{left + 120}" y="38" width="12" height="12" fill="#bbbbbb"/>'
             f'<text x="{left + 138}" y="49" font-size="12">NumPy / Ray (name at the bar)</text>']
    y = 66
    for label, ours, their_name, theirs in rows:
        parts.append(f'<text x="{left - 8}" y="{y + bar + 4}" font-size="12" text-anchor="end">'
                     f'{escape(label)}</text>')
        for value, colour, name in ((ours, "#219ebc", "strideweave"), (theirs, "#bbbbbb", their_name)):
            w = max(1.0, value * scale)
            parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar}" fill="{colour}"/>')
            parts.append(f'<text x="{left + w + 5:.1f}" y="{y + bar - 2}" font-size="11">'
                         f'{value:.2f} ms {escape(name)}</text>')
            y += bar
        y += gap
    for k, line in enumerate(lines):
        parts.append(f'<text x="20" y="{y + 16 + 18 * k}" font-size="12" fill="#444">{escape(line)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    caption = "from `make bench` output"
    if "--caption" in argv:
        i = argv.index("--caption")
        caption = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if not argv:
        print(__doc__)
        return 2
    rows = rows_of(pathlib.Path(argv[0]).read_text(encoding="utf-8"))
    if not rows:
        print(f"plot_benches: no side-by-side rows in {argv[0]}")
        return 1
    out = pathlib.Path(argv[1]) if len(argv) > 1 else HERE / "bench.svg"
    out.write_text(svg(rows, caption), encoding="utf-8")
    print(f"plot_benches: {len(rows)} rows -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
