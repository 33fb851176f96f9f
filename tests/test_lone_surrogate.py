"""`lone_surrogate`: its quick look (does it encode as UTF-8 JSON?) never hides one the walk finds."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_resili.server.strings import _first, lone_surrogate


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"text": "x\ud800"}, "text"),
        ({"k\udc00": 1}, "k\\udc00 (a key)"),
        ({"rows": [{"a": 1}, {"b": ["ok", "\udfff"]}]}, "rows/1/b/1"),
        ({"a": "\U0001f600 é", "b": "\x00\x7f\u2028"}, None),  # a pair and other escaped characters
        ({"a": "\\ud800", "b": "\\udfff"}, None),  # the escape's text, not a surrogate: the walk decides
        ({"a": ("\ud83d",)}, "a/0"),
        ({}, None),
        ({"a": float("nan"), "b": object()}, None),  # no JSON (encoding fails): the walk decides
        ({"a": {"b": ["\ud800"], 1: "ok"}}, "a/b/0"),
    ],
)
def test_the_quick_look_agrees_with_the_walk(arguments: dict[str, Any], path: str | None) -> None:
    assert lone_surrogate(arguments) == path
    assert _first(arguments, "") == path


def test_every_surrogate_code_point_is_seen_by_the_quick_look() -> None:
    for point in range(0xD800, 0xE000, 7):
        assert lone_surrogate({"s": ["ok", f"a{chr(point)}b"]}) == "s/1"
