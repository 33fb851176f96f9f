"""The compiled validator agrees with jsonschema: the same verdict, and jsonschema's own messages."""

import jsonschema
import pytest

from mcp_resili.registry.suites import load_all_suites
from mcp_resili.registry.validator import CompiledSchema

#: Values where JSON Schema dialects and Python's types tend to disagree.
TRICKY = [
    None,
    True,
    False,
    0,
    1,
    -1,
    1.0,
    1.5,
    2**70,
    float("nan"),
    "",
    "2024-01-01",
    "2024-01-01\n",  # Python's `$` matches before a final newline, ECMA's does not
    "٢٠٢٤-٠١-٠١",  # non-ASCII digits: Python's `\d` matches them
    "12:30",
    "EUR",
    "eur",
    "schedule_book_1",
    [],
    [1, "a"],
    ["x"],
    {},
    {"a": 1},
    (1, 2),  # not JSON
]


def schemas():
    seen = {}
    for suite in load_all_suites().values():
        for spec in suite.library.specs:
            for schema in (spec.input_schema, spec.output_schema):
                if schema is not None:
                    seen[repr(schema)] = schema
    return list(seen.values())


def instances(schema):
    """Tricky values at the top and in every property (one at a time, the rest from a valid-ish base)."""
    props = schema.get("properties", {})
    yield from TRICKY
    for name in props:
        for value in TRICKY:
            yield {name: value}
            yield {**{p: "x" for p in schema.get("required", [])}, name: value}
    yield {"unexpected": 1}


@pytest.mark.parametrize("schema", schemas(), ids=lambda s: str(sorted(s.get("properties", {})))[:40])
def test_the_compiled_validator_gives_jsonschemas_verdict_and_errors_on_every_suite_schema(schema):
    compiled, reference = CompiledSchema(schema), jsonschema.Draft202012Validator(schema)
    for instance in instances(schema):
        assert compiled.is_valid(instance) == reference.is_valid(instance), instance
        assert [e.message for e in compiled.iter_errors(instance)] == [
            e.message for e in reference.iter_errors(instance)
        ], instance


def test_an_invalid_instance_raises_jsonschemas_best_error():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}
    with pytest.raises(jsonschema.ValidationError, match="0 is less than the minimum of 1"):
        CompiledSchema(schema).validate({"n": 0})
    CompiledSchema(schema).validate({"n": 1.0})  # an integral float is an integer in both
