"""Charts as standalone SVG documents, drawn in Python: no JavaScript library, no network.

Every chart is an ``<svg class="chart" data-chart=KIND>`` whose marks carry ``class="mark"``, so a
test (or a reader's devtools) can tell a drawn chart from an empty frame. Each one is a complete
figure — title, axis titles with units, a legend, 95% intervals where there are any — so it can go
into a paper as it is (``report --svg DIR`` writes one file per chart).

Text is never clipped: widths are estimated from the glyph widths of DejaVu Sans (the widest of
the usual sans-serif fonts, and the one named first), long labels wrap onto several lines, and the
chart grows to fit its title and labels. Zero values stay visible: a zero bar is a thin bar, and
every heatmap cell has an outline.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Colour-blind-safe palette (Okabe–Ito).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
LEVEL_COLOURS = {"full": "#009E73", "partial": "#E69F00", "failure": "#D55E00"}
FONT = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif"

#: Widest a wrapped label or title line may be (px); longer text goes onto more lines.
LABEL_MAX = 300.0
TITLE_MAX = 640.0
#: Width of a zero-valued bar, so that "0%" is drawn rather than left blank.
ZERO_BAR = 2.0

# Advance widths in em of DejaVu Sans (rounded up), by character class.
_NARROW = set("il.,:;|!'`ıj ")
_SEMI = set('fjrt()[]{}/\\-"·')
_WIDE = set("mwMW%@")


#: What XML 1.0 forbids anywhere in a document: C0 controls but tab, newline and CR; lone surrogates;
#: U+FFFE and U+FFFF. (An SVG with one is not XML: no viewer or parser opens it.)
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def escape(text: str) -> str:
    """``text`` for SVG text or an attribute value: markup escaped, characters XML forbids shown as U+FFFD."""
    return html.escape(_NOT_XML.sub("\ufffd", text))


def text_width(text: str, size: float = 11, bold: bool = False) -> float:
    """An upper estimate of the rendered width of ``text`` in px (DejaVu Sans, or narrower fonts)."""
    total = 0.0
    for char in text:
        if char in _NARROW:
            total += 0.34
        elif char in _SEMI:
            total += 0.45
        elif char in _WIDE:
            total += 1.0
        elif char.isupper():
            total += 0.78
        elif char.isdigit():
            total += 0.65
        elif ord(char) > 0x2E80:  # CJK and other full-width scripts
            total += 1.0
        else:
            total += 0.64
    return total * size * (1.1 if bold else 1.0)


def wrap(text: str, size: float = 11, max_width: float = LABEL_MAX, bold: bool = False) -> list[str]:
    """``text`` broken into lines no wider than ``max_width``: at spaces, else inside long words."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if text_width(candidate, size, bold) <= max_width:
            line = candidate
            continue
        if line:
            lines.append(line)
        line = ""
        for char in word:  # a word wider than a line is cut between characters
            if line and text_width(line + char, size, bold) > max_width:
                lines.append(line)
                line = ""
            line += char
    lines.append(line)
    return lines


@dataclass(frozen=True)
class Bar:
    """One bar: a label, a value in [0, 1] and an optional 95% interval."""

    label: str
    value: float
    low: float | None = None
    high: float | None = None


def _svg(kind: str, width: float, height: float, body: list[str], title: str) -> str:
    w, h = int(width + 0.999), int(height + 0.999)
    return (
        f'<svg class="chart" data-chart="{kind}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" font-family="{FONT}" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
        f'<rect width="{w}" height="{h}" fill="#fff"/>' + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = 11, extra: str = "") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" {extra}>'
        f"{escape(text)}</text>"
    )


def _lines(
    x: float, y: float, lines: Sequence[str], anchor: str = "start", size: int = 11, extra: str = ""
) -> str:
    """Several lines of text, the first baseline at ``y``."""
    step = size + 2
    return "".join(_text(x, y + n * step, line, anchor, size, extra) for n, line in enumerate(lines))


class _Title:
    """A chart title wrapped to the chart's width; ``height`` is the space it takes at the top."""

    SIZE = 13

    def __init__(self, text: str, content_width: float) -> None:
        self.text = text
        limit = max(content_width, min(TITLE_MAX, text_width(text, self.SIZE, bold=True) + 8))
        self.lines = wrap(text, self.SIZE, limit - 8, bold=True)
        self.width = max(text_width(line, self.SIZE, bold=True) for line in self.lines) + 8
        self.height = 6 + (self.SIZE + 3) * len(self.lines) + 8

    def draw(self) -> str:
        return _lines(4, 4 + self.SIZE, self.lines, size=self.SIZE, extra='font-weight="bold"')


def _legend(
    items: Sequence[tuple[str, str]], x: float, y: float, max_width: float
) -> tuple[list[str], float]:
    """Swatch-and-name entries flowing over lines; (SVG parts, height taken)."""
    body: list[str] = []
    cx, cy = x, y
    for name, colour in items:
        width = 16 + text_width(name) + 14
        if cx > x and cx + width > x + max_width:
            cx, cy = x, cy + 16
        body.append(f'<rect x="{cx:.1f}" y="{cy - 9:.1f}" width="10" height="10" fill="{colour}"/>')
        body.append(_text(cx + 14, cy, name))
        cx += width
    return body, (cy - y) + 16 if items else 0.0


def _label_column(labels: Sequence[str]) -> tuple[list[list[str]], float]:
    wrapped = [wrap(label) for label in labels]
    width = max((text_width(line) for lines in wrapped for line in lines), default=0.0)
    return wrapped, width + 14


def _tick(value: float, percent: bool) -> str:
    return f"{value * 100:.0f}" if percent else f"{value:g}"


def _x_axis(x0: float, plot_w: float, top: float, bottom: float, percent: bool, title: str) -> list[str]:
    body = []
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        x = x0 + tick * plot_w
        body.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" stroke="#ddd"/>')
        body.append(_text(x, bottom + 13, _tick(tick, percent), "middle", 10))
    body.append(f'<line x1="{x0}" y1="{bottom:.1f}" x2="{x0 + plot_w}" y2="{bottom:.1f}" stroke="#888"/>')
    body.append(_text(x0 + plot_w / 2, bottom + 29, title, "middle"))
    return body


def _row_height(lines: int) -> float:
    return max(22.0, 13.0 * lines + 9)


def _whisker(lo: float, hi: float, mid: float) -> list[str]:
    return [
        f'<line class="ci" x1="{lo:.1f}" y1="{mid:.1f}" x2="{hi:.1f}" y2="{mid:.1f}" stroke="#222"/>',
        *(
            f'<line x1="{x:.1f}" y1="{mid - 4:.1f}" x2="{x:.1f}" y2="{mid + 4:.1f}" stroke="#222"/>'
            for x in (lo, hi)
        ),
    ]


def _bar_mark(x0: float, y: float, value: float, plot_w: float, height: float, colour: str, tip: str) -> str:
    width = max(0.0, min(1.0, value)) * plot_w
    zero = width < ZERO_BAR
    css = "mark zero" if zero else "mark"
    fill = "#444" if zero else colour
    return (
        f'<rect class="{css}" x="{x0}" y="{y:.1f}" width="{max(width, ZERO_BAR):.1f}" height="{height:.1f}" '
        f'fill="{fill}"><title>{escape(tip)}</title></rect>'
    )


def bar_chart(
    title: str,
    bars: Sequence[Bar],
    colour: str = PALETTE[0],
    axis_title: str = "rate (%)",
    percent: bool = True,
) -> str:
    """Horizontal bars on a 0–1 axis (shown as % unless ``percent=False``) with 95% interval whiskers."""
    return grouped_bar_chart(title, [(bar.label, [bar]) for bar in bars], [("", colour)], axis_title, percent)


def grouped_bar_chart(
    title: str,
    groups: Sequence[tuple[str, Sequence[Bar | None]]],
    series: Sequence[tuple[str, str]],
    axis_title: str = "rate (%)",
    percent: bool = True,
) -> str:
    """One row per group, one bar per series (name, colour) in it; a series may miss a group (None).

    Used to put runs side by side: a group per cell, a series per run. The legend names the series
    (when there is more than one) and says what the whiskers are.
    """
    wrapped, label_w = _label_column([label for label, _ in groups])
    plot_w, bar_h = 360.0, 14.0
    value_w = text_width("100.0%") + 8
    content_w = label_w + plot_w + value_w
    heading = _Title(title, content_w)
    top = heading.height
    body: list[str] = []
    y: float = top
    for (_, bars), lines in zip(groups, wrapped, strict=True):
        per_bar = max(len(series), 1) * (bar_h + 4)
        row_h = max(_row_height(len(lines)), per_bar + 6)
        body.append(_lines(label_w - 8, y + (row_h - 13 * len(lines)) / 2 + 10, lines, "end"))
        for n, bar in enumerate(bars):
            if bar is None:
                continue
            by = y + (row_h - per_bar) / 2 + n * (bar_h + 4) + 2
            name = series[n][0] if len(series) > 1 else ""
            value_text = f"{bar.value * 100:.1f}%" if percent else f"{bar.value:.3f}"
            tip = f"{bar.label}{' · ' + name if name else ''}: {value_text}"
            body.append(_bar_mark(label_w, by, bar.value, plot_w, bar_h, series[n][1], tip))
            if bar.low is not None and bar.high is not None:
                body.extend(_whisker(label_w + bar.low * plot_w, label_w + bar.high * plot_w, by + bar_h / 2))
            body.append(_text(label_w + plot_w + 6, by + bar_h - 3, value_text, size=10))
        y += row_h
    # Grid and axis first, so that bars and whiskers are drawn over the grid lines.
    body[:0] = [heading.draw(), *_x_axis(label_w, plot_w, top - 4, y + 2, percent, axis_title)]
    items = [(name, colour) for name, colour in series] if len(series) > 1 else []
    legend, legend_h = _legend(items, label_w, y + 50, plot_w + value_w)
    body.extend(legend)
    bottom = y + 50 + legend_h
    if any(bar is not None and bar.low is not None for _, bars in groups for bar in bars):
        body.extend(_whisker(label_w, label_w + 18, bottom - 4))
        body.append(_text(label_w + 24, bottom, "95% interval"))
        bottom += 16
    return _svg("bars", max(content_w, heading.width), bottom - 6, body, title)


def stacked_levels(title: str, rows: Sequence[tuple[str, Mapping[str, float]]]) -> str:
    """One horizontal bar per row, split into full / partial / failure shares, with a legend."""
    wrapped, label_w = _label_column([label for label, _ in rows])
    plot_w = 360.0
    content_w = label_w + plot_w + 16
    heading = _Title(title, content_w)
    top = heading.height
    body: list[str] = []
    y: float = top
    for (label, shares), lines in zip(rows, wrapped, strict=True):
        row_h = _row_height(len(lines))
        body.append(_lines(label_w - 8, y + (row_h - 13 * len(lines)) / 2 + 10, lines, "end"))
        x = label_w
        for level, colour in LEVEL_COLOURS.items():
            width = max(0.0, shares.get(level, 0.0)) * plot_w
            if width > 0:
                body.append(
                    f'<rect class="mark" x="{x:.1f}" y="{y + 4:.1f}" width="{width:.1f}" '
                    f'height="{row_h - 8:.1f}" fill="{colour}"><title>{escape(label)} {level}: '
                    f"{shares.get(level, 0.0) * 100:.1f}%</title></rect>"
                )
            x += width
        if x == label_w:  # nothing to stack: say so rather than leave a blank row
            body.append(_text(label_w + 4, y + row_h / 2 + 4, "no scored episodes", extra='fill="#666"'))
        y += row_h
    body[:0] = [
        heading.draw(),
        *_x_axis(label_w, plot_w, top - 4, y + 2, True, "share of scored episodes (%)"),
    ]
    legend, legend_h = _legend(list(LEVEL_COLOURS.items()), label_w, y + 50, plot_w)
    body.extend(legend)
    return _svg("stacked", max(content_w, heading.width), y + 50 + legend_h, body, title)


def _blend(value: float) -> str:
    # Near-white (0) to a deep blue (1): readable and monotone in lightness; 0 is not the background.
    v = max(0.0, min(1.0, value))
    r, g, b = (int(s + (t - s) * v) for s, t in zip((236, 243, 250), (8, 69, 148), strict=True))
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
    """A grid of cells coloured by value in [0, 1], annotated, with a colour scale; missing cells grey.

    Axis values are numbers (λ, ε) or labels (modes, levels).
    """
    cells = values
    x_names, y_names = [_label(x) for x in xs], [_label(y) for y in ys]
    cell_w = max(56.0, *(text_width(n) + 10 for n in x_names)) if x_names else 56.0
    cell_h = 40.0
    left = max(text_width(y_label) + 8, max((text_width(n) for n in y_names), default=0.0) + 14)
    grid_w = cell_w * len(xs)
    scale_w = 5 * 34.0
    content_w = left + max(grid_w, text_width(x_label), scale_w + text_width("value") + 16) + 16
    heading = _Title(title, content_w)
    top = heading.height + 18  # room for the y-axis title above the rows
    body = [heading.draw(), _text(4, top - 6, y_label)]
    for j, y_name in enumerate(y_names):
        body.append(_text(left - 6, top + j * cell_h + cell_h / 2 + 4, y_name, "end"))
        for i, x_name in enumerate(x_names):
            value = cells.get((xs[i], ys[j]))
            fill = "#d9d9d9" if value is None else _blend(value)
            x, y = left + i * cell_w, top + j * cell_h
            text = "—" if value is None else f"{value:.2f}"
            body.append(
                f'<rect class="mark" x="{x:.1f}" y="{y:.1f}" width="{cell_w - 2:.1f}" '
                f'height="{cell_h - 2:.1f}" fill="{fill}" stroke="#8c8c8c" stroke-width="1">'
                f"<title>{escape(x_label)}={escape(x_name)}, {escape(y_label)}={escape(y_name)}: "
                f"{text}</title></rect>"
            )
            colour = "#fff" if value is not None and value > 0.55 else "#222"
            body.append(_text(x + cell_w / 2 - 1, y + cell_h / 2 + 4, text, "middle", 11, f'fill="{colour}"'))
    bottom = top + len(ys) * cell_h
    for i, x_name in enumerate(x_names):
        body.append(_text(left + i * cell_w + cell_w / 2, bottom + 14, x_name, "middle"))
    body.append(_text(left + grid_w / 2, bottom + 31, x_label, "middle"))
    scale_y = bottom + 46
    body.append(_text(left, scale_y + 11, "value"))
    sx = left + text_width("value") + 8
    for n in range(5):
        v = n / 4
        body.append(
            f'<rect x="{sx + n * 34:.1f}" y="{scale_y:.1f}" width="32" height="14" fill="{_blend(v)}" '
            'stroke="#8c8c8c"/>'
        )
        body.append(_text(sx + n * 34 + 16, scale_y + 27, f"{v:g}", "middle", 10))
    return _svg("heatmap", max(content_w, heading.width), scale_y + 34, body, title)


def line_chart(
    title: str, series: Mapping[str, Sequence[tuple[float, float]]], x_label: str, y_label: str
) -> str:
    """Lines with point markers on a [0, 1] y axis; x is numeric (e.g. k of pass^k); a legend below."""
    left, plot_w, plot_h = 50.0, 380.0, 200.0
    content_w = left + plot_w + 30
    heading = _Title(title, content_w)
    top = heading.height + 16
    xs = sorted({x for points in series.values() for x, _ in points}) or [0.0, 1.0]
    x_min, x_max = xs[0], xs[-1] if xs[-1] > xs[0] else xs[0] + 1

    def px(x: float) -> float:
        return left + (x - x_min) / (x_max - x_min) * plot_w

    def py(y: float) -> float:
        return top + (1 - max(0.0, min(1.0, y))) * plot_h

    body = [heading.draw(), _text(4, top - 8, y_label, size=11)]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        body.append(
            f'<line x1="{left}" y1="{py(tick):.1f}" x2="{left + plot_w}" y2="{py(tick):.1f}" stroke="#ddd"/>'
        )
        body.append(_text(left - 6, py(tick) + 4, f"{tick:.2f}", "end", 10))
    for x in xs:
        body.append(_text(px(x), top + plot_h + 14, f"{x:g}", "middle", 10))
    body.append(_text(left + plot_w / 2, top + plot_h + 30, x_label, "middle"))
    items = []
    for n, (name, points) in enumerate(sorted(series.items())):
        colour = PALETTE[n % len(PALETTE)]
        items.append((name, colour))
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
    legend_w = max([plot_w, *(text_width(name) + 30 for name, _ in items)])
    legend, legend_h = _legend(items, left, top + plot_h + 50, legend_w)
    body.extend(legend)
    width = max(content_w, left + legend_w + 10, heading.width)
    return _svg("lines", width, top + plot_h + 50 + legend_h, body, title)
