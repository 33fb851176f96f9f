"""The pipeline's cheaper per-call checks answer exactly as the walks and calls they stand in for."""

from __future__ import annotations

import enum
import hashlib
import math
import random
from typing import Any

import pytest

from mcp_resili.faults.rng import derive_rng
from mcp_resili.server.budget import json_size, larger_than, plain_json
from mcp_resili.server.numbers import MAX_NUMBER, unusable_number, unusable_number_in
from mcp_resili.server.strings import lone_surrogate


def _reference_rng(seed: int, episode: str, tool: str, ordinal: int) -> random.Random:
    """How derive_rng built its generator before (stored traces and the docs' figures hold its draws)."""
    key = f"{seed}\x1f{episode}\x1f{tool}\x1f{ordinal}".encode()
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=16).digest(), "big"))


def _draws(rng: random.Random) -> list[Any]:
    return [rng.random(), rng.gauss(0, 1), rng.gauss(0, 1), rng.choice("abcdef"), rng.getrandbits(99)]


@pytest.mark.parametrize("seed", [0, 7, -3, 2**70])
@pytest.mark.parametrize("episode", ["task-1/0", "task-1/0/apply", "", "é/ü"])
def test_derived_streams_are_the_very_same_generators(seed: int, episode: str) -> None:
    for tool, ordinal in [("a", 0), ("file_operations_reader", 1), ("x", 99)]:
        ours = derive_rng(seed, episode, tool, ordinal)
        reference = _reference_rng(seed, episode, tool, ordinal)
        assert type(ours) is random.Random
        assert ours.getstate() == reference.getstate()
        assert _draws(ours) == _draws(reference)
    with pytest.raises(ValueError, match="ordinal"):
        derive_rng(0, "e", "t", -1)


class _Big(enum.IntEnum):
    HUGE = 2**60


class _Float(float):
    pass


#: Numbers at and around every edge the look at the text must not miss.
EDGES: list[Any] = [
    0,
    -1,
    True,
    MAX_NUMBER,
    -MAX_NUMBER,
    MAX_NUMBER + 1,
    -(MAX_NUMBER + 1),
    10**15,
    10**16,
    10**400,
    float(MAX_NUMBER),
    9.1e15,
    9007199254740992.0,
    1e16,
    -1e17,
    1e308,
    1.5e-7,
    0.0001,
    123456789012345.6,
    math.nan,
    math.inf,
    -math.inf,
    _Big.HUGE,
    _Float("inf"),
    _Float(2.5),
    "NaN",
    "Infinity",
    "1e5",
    "12345678901234567",
    "x",
    None,
]


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice(EDGES)
    if roll < 0.7:
        return {
            rng.choice(["a", "b", "12345678901234567", "e"]) + str(i): _value(rng, depth + 1)
            for i in range(3)
        }
    items = [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return items if roll < 0.9 else tuple(items)


def test_the_look_at_the_text_agrees_with_the_walk_on_numbers() -> None:
    rng = random.Random(37)
    flagged = 0
    for _ in range(3000):
        value = {"v": _value(rng)}
        encoded = plain_json(value)
        assert encoded is not None
        expected = unusable_number(value)
        assert unusable_number_in(value, encoded) == expected, value
        flagged += expected is not None
    assert flagged > 300  # the edges were met, not only the easy cases


@pytest.mark.parametrize(
    "value",
    [
        {"a": "text", "b": [1, 2.5, None, True], "c": {"d": "é\U0001f600"}},
        {},
        {"n": math.nan, "i": -math.inf},
        {1: "int key", "t": ("a", 1)},
    ],
)
def test_one_encoding_answers_size_and_surrogates(value: dict[Any, Any]) -> None:
    encoded = plain_json(value)
    assert encoded is not None
    assert len(encoded) == json_size(value)
    assert lone_surrogate(value) is None


@pytest.mark.parametrize(
    "value",
    [{"a": "x\ud800"}, {"k\udc00": 1}, {"a": object()}, {"a": [{"b": "\udfff"}]}],
)
def test_values_json_text_cannot_hold_get_no_encoding(value: dict[str, Any]) -> None:
    # Then the pipeline measures and checks them the long way, as before.
    assert plain_json(value) is None


def _reference_size(value: Any) -> int:
    """The size `larger_than` counts, one value at a time: a string its length + 3, a container 2 (a list
    or tuple 1 more per item, a dict key its length + 4, a non-string key 8), anything else 8."""
    if type(value) is str:
        return len(value) + 3
    if type(value) is dict:
        return 2 + sum((len(k) + 4 if type(k) is str else 8) + _reference_size(v) for k, v in value.items())
    if type(value) in (list, tuple):
        return 2 + len(value) + sum(_reference_size(v) for v in value)
    return 8


def test_the_size_walk_says_more_than_the_limit_exactly_when_the_count_is() -> None:
    rng = random.Random(41)
    for _ in range(2000):
        value = {"v": _value(rng), "s": "x" * rng.randint(0, 40), 7: [_value(rng), "ab"]}
        size = _reference_size(value)
        for limit in (0, size - 9, size - 1, size, size + 1):
            assert larger_than(value, limit) == (size > limit), (value, limit)
    # It stops as soon as it is past the limit: a value that holds itself is still "larger".
    looped: dict[str, Any] = {"rows": []}
    looped["rows"].append(looped)
    assert larger_than(looped, 10_000)
