"""Fuzzing our server: hypothesis strategies built from each tool's input schema, and the checks every
fuzzed call must pass. Shared by tests/test_fuzz.py and bench/fuzz_server.py.

A fuzzed call is mostly schema-valid (so it reaches the tool's code) with the extremes JSON allows
mixed in: numbers at and past the schema bounds, 2**53 and 10**400, NaN and infinities, empty and odd
strings, payloads in the wrong format; some calls break the schema on purpose (a value of any JSON type,
unknown keys), a few name no tool at all.

`CallChecker` holds a call to account: an answer (never a JSON-RPC error), structured content that
satisfies the output schema and is plain JSON (no NaN, no infinity), an error that names a code (and,
when no fault fired, one the tool declares), no crash and no timeout, and exactly one recorded event
with the next sequence number and the next fault-decision ordinal of its tool.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import mcp_types as types
from hypothesis import strategies as st

from mcp_resili.constants import DISCOVERY_TOOLS
from mcp_resili.trace import FinishEvent, ToolCallEvent, TraceEvent

#: Error codes that mean a bug on our side, whatever the input.
HARNESS_BUGS = ("TOOL_CRASHED", "TOOL_TIMEOUT")
ERROR_LINE = re.compile(r"^Error ([A-Z][A-Z0-9_]*): ")
UNBOUNDED = 2**60
#: Range of numbers whose schema sets no bound.
SCALE = 2**40
#: Numbers JSON can carry that no tool can work with: refused up front (INVALID_INPUT).
EXTREME_NUMBERS = (2**53, -(2**53), 10**400, 1e308, -1e308, math.nan, math.inf, -math.inf)
#: Strings that reach the simulators' interesting paths: every payload format, in the wrong place too.
INTERESTING_STRINGS = (
    "",
    "data/sales.csv",
    "data/a.json",
    "reports/q3.xml",
    "missing.csv",
    "/private/keys.csv",
    "https://api.example.com/orders/7",
    "ftp://nowhere",
    "id,name,category,value\n1,ada,alpha,1.5\n",
    "id,name,category,value\n1,ada,alpha,nan\n2,bob,beta,1e999\n",
    '[{"id": 1, "name": "ada", "category": "alpha", "value": 2.5}]',
    '[{"id": Infinity, "name": "ada", "category": "alpha", "value": NaN}, 3]',
    "[" * 2000 + "]" * 2000,
    "<records><record id='1' name='ada' category='alpha' value='3'/></records>",
    "<records><record/></records>",
    '<!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]><records>&b;</records>',
    "csv",
    "json",
    "xml",
    "text",
    "2026-03-01",
    "09:00",
    "x" * 5000,
    "\x00\ud7ff\u202e",
)


def rarely(
    common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], one_in: int
) -> st.SearchStrategy[Any]:
    """``rare`` about once in ``one_in`` draws, else ``common`` (`st.one_of` weighs its branches alike)."""
    # Hypothesis favours the ends of an integer range: the rare branch sits in the middle.
    return st.integers(0, one_in - 1).flatmap(lambda n: rare if n == one_in // 2 else common)


#: Scalars, one in about thirty of them a number no tool can use.
JSON_SCALARS = rarely(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**40), 2**40),
        st.floats(-1e12, 1e12, allow_nan=False),
        st.sampled_from(INTERESTING_STRINGS),
        st.text(max_size=20),
    ),
    st.one_of(st.sampled_from(EXTREME_NUMBERS), st.integers(-UNBOUNDED, UNBOUNDED), st.floats()),
    30,
)
#: Any JSON value (now and then NaN or an infinity: JSON parsers accept them, and so does the SDK).
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def _bounded_integers(schema: dict[str, Any]) -> st.SearchStrategy[int]:
    low = schema.get("minimum", -SCALE)
    high = schema.get("maximum", SCALE)
    if "exclusiveMinimum" in schema:
        low = max(low, math.floor(schema["exclusiveMinimum"]) + 1)
    if "exclusiveMaximum" in schema:
        high = min(high, math.ceil(schema["exclusiveMaximum"]) - 1)
    # The bounds themselves, and one step past each (refused by the schema).
    edges = sorted({int(v) for v in (low, high, low - 1, high + 1, 0)})
    return rarely(st.integers(int(low), int(high)), st.sampled_from(edges), 5)


def _bounded_numbers(schema: dict[str, Any]) -> st.SearchStrategy[float | int]:
    low = schema.get("minimum", schema.get("exclusiveMinimum", -SCALE))
    high = schema.get("maximum", schema.get("exclusiveMaximum", SCALE))
    inside = st.floats(
        min_value=low,
        max_value=high,
        exclude_min="exclusiveMinimum" in schema,
        exclude_max="exclusiveMaximum" in schema,
        allow_nan=False,
    )
    return rarely(inside | _bounded_integers(schema), st.sampled_from([low, high]), 5)


def from_schema(schema: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values for a JSON Schema: mostly valid, with the bounds, the extremes and wrong types mixed in."""
    if not isinstance(schema, dict) or depth > 6:
        return ANY_JSON
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([from_schema(s, depth + 1) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, depth) for k in kind])
    valid = _valid_for(kind, schema, depth)
    if depth == 0:
        return valid
    # One value in ten is one the schema does not expect, or a number no tool can use.
    return rarely(valid, st.sampled_from(EXTREME_NUMBERS) | ANY_JSON, 10)


def _valid_for(kind: Any, schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    if kind == "object" or (kind is None and "properties" in schema):
        return _objects(schema, depth)
    if kind == "array":
        low = int(schema.get("minItems", 0))
        high = min(int(schema.get("maxItems", low + 4)), low + 4)
        return st.lists(from_schema(schema.get("items", {}), depth + 1), min_size=low, max_size=high)
    if kind == "string":
        low = int(schema.get("minLength", 0))
        high = min(int(schema.get("maxLength", low + 30)), low + 30)
        return st.text(min_size=low, max_size=high) | st.sampled_from(INTERESTING_STRINGS)
    if kind == "integer":
        return _bounded_integers(schema)
    if kind == "number":
        return _bounded_numbers(schema)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return ANY_JSON


@st.composite
def _object_draw(draw: st.DrawFn, schema: dict[str, Any], depth: int) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties", {})
    required = [name for name in schema.get("required", []) if name in properties]
    optional = [name for name in properties if name not in required]
    chosen = required + [name for name in optional if draw(st.booleans())]
    value = {name: draw(from_schema(properties[name], depth + 1)) for name in chosen}
    if schema.get("additionalProperties", True) is not False and draw(st.integers(0, 3)) == 0:
        value.update(draw(st.dictionaries(st.text(max_size=10), ANY_JSON, max_size=3)))
    return value


def _objects(schema: dict[str, Any], depth: int) -> st.SearchStrategy[dict[str, Any]]:
    return _object_draw(schema, depth)


def arguments_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Arguments for a tool: from its input schema, or (rarely) any JSON object, unknown keys included."""
    return rarely(from_schema(schema), st.dictionaries(st.text(max_size=12), ANY_JSON, max_size=4), 8)


def calls_for(tools: Sequence[types.Tool]) -> st.SearchStrategy[tuple[str, Any]]:
    """One call: a listed tool with fuzzed arguments, or (rarely) a name nobody listed."""
    # Built once per tool: a strategy made inside the draw would be rebuilt for every example.
    per_tool = {
        tool.name: st.tuples(st.just(tool.name), arguments_for(dict(tool.input_schema))) for tool in tools
    }
    listed = st.sampled_from(sorted(per_tool)).flatmap(per_tool.__getitem__)
    unlisted = st.tuples(st.text(max_size=20), st.dictionaries(st.text(max_size=5), ANY_JSON, max_size=2))
    return rarely(listed, unlisted, 16)


@dataclass
class CallChecker:
    """Checks the calls of one episode in order; ``problems`` names everything that went wrong."""

    tools: dict[str, types.Tool]
    problems: list[str] = field(default_factory=list)
    calls: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    _seq: int = 0
    _ordinals: Counter[str] = field(default_factory=Counter)

    def check(
        self, name: str, arguments: Any, result: types.CallToolResult, recorded: Sequence[TraceEvent]
    ) -> None:
        """Check one answered call and the events the server recorded for it."""
        self.calls += 1
        where = f"{name}({json.dumps(arguments, default=repr)[:300]})"
        tool = self.tools.get(name)
        text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
        code = None
        if result.is_error:
            match = ERROR_LINE.match(text)
            code = match.group(1) if match else None
            self.errors[code or "?"] += 1
            if code is None:
                self.problems.append(f"{where}: error without a code: {text[:200]!r}")
            elif code in HARNESS_BUGS:
                self.problems.append(f"{where}: {text[:300]}")
        elif tool is not None and tool.output_schema is not None:
            self._check_output(where, tool, result)
        self._check_recorded(where, name, code, recorded)
        if name in DISCOVERY_TOOLS and any(getattr(e, "decision", None) is not None for e in recorded):
            self.problems.append(f"{where}: a discovery call got a fault decision")

    def _check_output(self, where: str, tool: types.Tool, result: types.CallToolResult) -> None:
        structured = result.structured_content
        if structured is None:
            self.problems.append(f"{where}: success without structured content")
            return
        try:
            json.dumps(structured, allow_nan=False)
        except ValueError:
            self.problems.append(f"{where}: structured content holds NaN or an infinity")
        text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
        if text != json.dumps(structured, sort_keys=True):  # the agent reads what is in the result
            self.problems.append(f"{where}: the text is not the structured content's JSON: {text[:200]!r}")
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(dict(tool.output_schema or {})).iter_errors(structured)
        )
        if error is not None:
            self.problems.append(f"{where}: output breaks its schema: {error.message[:200]}")

    def _check_recorded(
        self, where: str, name: str, code: str | None, recorded: Sequence[TraceEvent]
    ) -> None:
        if len(recorded) != 1:
            self.problems.append(f"{where}: {len(recorded)} events recorded, expected 1")
            return
        (event,) = recorded
        self._seq += 1
        if event.seq != self._seq:
            self.problems.append(f"{where}: recorded seq {event.seq}, expected {self._seq}")
        if isinstance(event, FinishEvent):
            return
        assert isinstance(event, ToolCallEvent)
        if event.tool != name or event.error_code != code:
            self.problems.append(f"{where}: recorded {event.tool} {event.error_code}, answered {code}")
        if event.decision is not None:
            if event.decision.ordinal != self._ordinals[name]:
                self.problems.append(
                    f"{where}: fault ordinal {event.decision.ordinal}, expected {self._ordinals[name]}"
                )
            self._ordinals[name] += 1
        tool = self.tools.get(name)
        declared = (tool.meta or {}).get("mcp-resili/errors", []) if tool is not None else []
        if code is not None and event.fault is None and tool is not None and code not in declared:
            self.problems.append(f"{where}: error {code} is not declared by the tool ({declared})")
