"""Every chart is well-formed XML whatever its labels hold: characters XML 1.0 forbids are replaced."""

import xml.etree.ElementTree as ET

import pytest

from mcp_resili.report.svg import (
    Bar,
    bar_chart,
    escape,
    grouped_bar_chart,
    heatmap,
    line_chart,
    stacked_levels,
)

#: NUL, BEL, ESC, a vertical tab, U+FFFE and a lone surrogate (none allowed in XML 1.0), plus markup.
BAD = "a\x00b\x07c\x1b[31m\x0b\ufffe\ud800<&>\"'"

CHARTS = {
    "bars": lambda: bar_chart(BAD, [Bar(BAD, 0.5, 0.4, 0.6)], axis_title=BAD),
    "grouped": lambda: grouped_bar_chart(BAD, [(BAD, [Bar(BAD, 0.2), None])], [(BAD, "#000"), ("b", "#111")]),
    "stacked": lambda: stacked_levels(BAD, [(BAD, {"full": 0.5, "failure": 0.5})]),
    "heatmap": lambda: heatmap(BAD, [BAD, 0.1], [BAD], {(BAD, BAD): 0.3}, BAD, BAD),
    "lines": lambda: line_chart(BAD, {BAD: [(1, 0.5), (2, 0.25)]}, BAD, BAD),
}


@pytest.mark.parametrize("kind", CHARTS)
def test_a_chart_with_control_characters_in_its_labels_parses_as_xml(kind):
    svg = CHARTS[kind]()
    root = ET.fromstring(svg.encode("utf-8"))  # a lone surrogate would not even encode
    texts = [*root.itertext(), *(value for node in root.iter() for value in node.attrib.values())]
    shown = "".join(texts)
    assert "a\ufffdb\ufffdc\ufffd[31m" in shown and "<&>" in shown


def test_escape_keeps_what_xml_allows():
    allowed = "tab\tnewline\ncr\r é 中 \U0001f600 \x7f \ue000 \ufffd"
    assert escape(allowed) == allowed
    assert escape("\x00\x08\x0c\x1f\ud800\udfff\ufffe\uffff") == "\ufffd" * 8
