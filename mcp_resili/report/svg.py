"""Charts as inline SVG strings, drawn in Python: no JavaScript library, no network.

Every chart is an ``<svg class="chart" data-chart=KIND>`` whose marks carry ``class="mark"``, so a
test (or a reader's devtools) can tell a drawn chart from an empty frame.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

#: Colour-blind-safe palette (Okabe–Ito).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
LEVEL_COLOURS = {"full": "#009E73", "partial": "#E69F00", "failure": "#D55E00"}


@dataclass(frozen=True)
class Bar:
    """One bar: a label, a value in [0, 1] and an optional 95% interval."""

    label: str
    value: float
    low: float | None = None
    high: float | None = None


def _svg(kind: str, width: int, height: int, body: list[str], title: str) -> str:
    return (
        f'<svg class="chart" data-chart="{kind}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>' + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = 11, extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" {extra}>'
        f"{escape(text)}</text>"
    )


def bar_chart(title: str, bars: Sequence[Bar], colour: str = PALETTE[0]) -> str:
    """Horizontal bars on a 0–100% axis with 95% interval whiskers."""
    label_w, plot_w, row_h = 260, 360, 22
    height = 30 + row_h * len(bars) + 24
    body = []
    x0 = label_w
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        x = x0 + tick * plot_w
        body.append(f'<line x1="{x:.1f}" y1="24" x2="{x:.1f}" y2="{height - 22}" stroke="#ddd"/>')
        body.append(_text(x, height - 8, f"{tick * 100:.0f}%", "middle", 10))
    for n, bar in enumerate(bars):
        y = 28 + n * row_h
        body.append(_text(label_w - 6, y + 13, bar.label, "end"))
        width = max(0.0, min(1.0, bar.value)) * plot_w
        body.append(
            f'<rect class="mark" x="{x0}" y="{y + 3}" width="{width:.1f}" height="{row_h - 8}" '
            f'fill="{colour}"><title>{escape(bar.label)}: {bar.value * 100:.1f}%</title></rect>'
        )
        if bar.low is not None and bar.high is not None:
            lo, hi = x0 + bar.low * plot_w, x0 + bar.high * plot_w
            mid = y + row_h / 2 - 1
            body.append(f'<line class="ci" x1="{lo:.1f}" y1="{mid}" x2="{hi:.1f}" y2="{mid}" stroke="#222"/>')
            for x in (lo, hi):
                body.append(f'<line x1="{x:.1f}" y1="{mid - 4}" x2="{x:.1f}" y2="{mid + 4}" stroke="#222"/>')
        body.append(_text(x0 + plot_w + 6, y + 13, f"{bar.value * 100:.1f}%"))
    body.insert(0, _text(4, 14, title, size=12, extra='font-weight="bold"'))
    return _svg("bars", label_w + plot_w + 60, height, body, title)


def stacked_levels(title: str, rows: Sequence[tuple[str, Mapping[str, float]]]) -> str:
    """One horizontal bar per row, split into full / partial / failure shares."""
    label_w, plot_w, row_h = 260, 360, 22
    height = 30 + row_h * len(rows) + 30
    body = [_text(4, 14, title, size=12, extra='font-weight="bold"')]
    for n, (label, shares) in enumerate(rows):
        y = 28 + n * row_h
        body.append(_text(label_w - 6, y + 13, label, "end"))
        x = float(label_w)
        for level, colour in LEVEL_COLOURS.items():
            width = max(0.0, shares.get(level, 0.0)) * plot_w
            if width > 0:
                body.append(
                    f'<rect class="mark" x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{row_h - 8}" '
                    f'fill="{colour}"><title>{escape(label)} {level}: '
                    f"{shares.get(level, 0.0) * 100:.1f}%</title></rect>"
                )
            x += width
    legend_y = height - 12
    for n, (level, colour) in enumerate(LEVEL_COLOURS.items()):
        lx = label_w + n * 90
        body.append(f'<rect x="{lx}" y="{legend_y - 9}" width="10" height="10" fill="{colour}"/>')
        body.append(_text(lx + 14, legend_y, level))
    return _svg("stacked", label_w + plot_w + 20, height, body, title)


def _blend(value: float) -> str:
    # White (0) to a deep blue (1): readable and monotone in lightness.
    v = max(0.0, min(1.0, value))
    r, g, b = (int(255 + (t - 255) * v) for t in (8, 69, 148))
    return f"#{r:02x}{g:02x}{b:02x}"


def _label(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:g}"


def heatmap(
    title: str,
    xs: Sequence[float | str],
    ys: Sequence[float | str],
    values: Mapping[tuple[Any, Any], float],
    x_label: str,
    y_label: str,
) -> str:
    """A grid of cells coloured by value in [0, 1], annotated; missing cells are grey.

    Axis values are numbers (λ, ε) or labels (modes, levels).
    """
    cells = values
    cell, left, top = 56, 70, 40
    width, height = left + cell * len(xs) + 20, top + cell * len(ys) + 50
    body = [_text(4, 14, title, size=12, extra='font-weight="bold"')]
    for j, y_value in enumerate(ys):
        body.append(_text(left - 6, top + j * cell + cell / 2 + 4, _label(y_value), "end"))
        for i, x_value in enumerate(xs):
            value = cells.get((x_value, y_value))
            fill = "#e5e5e5" if value is None else _blend(value)
            x, y = left + i * cell, top + j * cell
            text = "—" if value is None else f"{value:.2f}"
            body.append(
                f'<rect class="mark" x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" fill="{fill}">'
                f"<title>{escape(x_label)}={escape(_label(x_value))}, "
                f"{escape(y_label)}={escape(_label(y_value))}: {text}</title></rect>"
            )
            colour = "#fff" if value is not None and value > 0.55 else "#222"
            body.append(_text(x + cell / 2 - 1, y + cell / 2 + 4, text, "middle", 11, f'fill="{colour}"'))
    for i, x_value in enumerate(xs):
        body.append(_text(left + i * cell + cell / 2, top + len(ys) * cell + 14, _label(x_value), "middle"))
    body.append(_text(left + len(xs) * cell / 2, height - 10, x_label, "middle"))
    body.append(_text(12, top - 8, y_label))
    return _svg("heatmap", width, height, body, title)


def line_chart(
    title: str, series: Mapping[str, Sequence[tuple[float, float]]], x_label: str, y_label: str
) -> str:
    """Lines with point markers on a [0, 1] y axis; x is numeric (e.g. k of pass^k)."""
    left, top, plot_w, plot_h = 50, 30, 380, 200
    xs = sorted({x for points in series.values() for x, _ in points}) or [0.0, 1.0]
    x_min, x_max = xs[0], xs[-1] if xs[-1] > xs[0] else xs[0] + 1

    def px(x: float) -> float:
        return left + (x - x_min) / (x_max - x_min) * plot_w

    def py(y: float) -> float:
        return top + (1 - max(0.0, min(1.0, y))) * plot_h

    body = [_text(4, 14, title, size=12, extra='font-weight="bold"')]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        body.append(
            f'<line x1="{left}" y1="{py(tick):.1f}" x2="{left + plot_w}" y2="{py(tick):.1f}" stroke="#ddd"/>'
        )
        body.append(_text(left - 6, py(tick) + 4, f"{tick:.2f}", "end", 10))
    for x in xs:
        body.append(_text(px(x), top + plot_h + 14, f"{x:g}", "middle", 10))
    body.append(_text(left + plot_w / 2, top + plot_h + 30, x_label, "middle"))
    body.append(_text(4, top - 6, y_label, size=10))
    for n, (name, points) in enumerate(sorted(series.items())):
        colour = PALETTE[n % len(PALETTE)]
        ordered = sorted(points)
        path = " ".join(
            f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for i, (x, y) in enumerate(ordered)
        )
        if path:
            body.append(f'<path class="mark" d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in ordered:
            body.append(
                f'<circle class="mark" cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                f"<title>{escape(name)}: {x:g} → {y:.3f}</title></circle>"
            )
        ly = top + plot_h + 48 + n * 16
        body.append(f'<rect x="{left}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>')
        body.append(_text(left + 14, ly, name))
    height = top + plot_h + 56 + 16 * len(series)
    return _svg("lines", left + plot_w + 30, height, body, title)
