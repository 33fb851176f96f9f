r"""JSON Schema (Draft 2020-12) validation compiled once per schema, with a fast path for valid input.

Most instances a benchmark validates are valid (a simulator's output, a well-formed tool call), and
``jsonschema`` spends most of its time walking the schema even then: about a third of an episode's CPU
went there. `CompiledSchema` asks a compiled Rust validator (``jsonschema_rs``) "valid?" first and only
hands a rejected instance to ``jsonschema``, which then decides and explains. So the verdict and every
error message are ``jsonschema``'s whenever the fast validator says no, and the two agree on yes
(tests/test_validator.py checks the edge cases where the dialects differ: ``\d`` on non-ASCII digits,
``$`` before a final newline, integral floats, booleans as numbers). Without ``jsonschema_rs`` every
instance takes the slow path.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError, ValidationError

_rs: Any
try:  # a compiled wheel: absent on a platform without one, then everything goes through jsonschema
    import jsonschema_rs as _rs
except ImportError:  # pragma: no cover - the dependency is declared; this is a fallback
    _rs = None


class CompiledSchema:
    """A schema's validators, built once: ``is_valid``, ``iter_errors`` and ``validate``."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._slow = jsonschema.Draft202012Validator(schema)
        self._fast: Any = None
        if _rs is not None:
            try:
                # Formats are annotations in Draft 2020-12 (jsonschema does not assert them either).
                self._fast = _rs.Draft202012Validator(dict(schema), validate_formats=False)
            except Exception:  # a schema it cannot compile: jsonschema alone decides
                self._fast = None

    def _fast_accepts(self, instance: Any) -> bool:
        if self._fast is None:
            return False
        try:
            return bool(self._fast.is_valid(instance))
        except (ValueError, TypeError):  # not JSON-shaped (e.g. non-string keys): let jsonschema say
            return False

    def is_valid(self, instance: Any) -> bool:
        """Whether ``instance`` conforms."""
        return self._fast_accepts(instance) or self._slow.is_valid(instance)

    def iter_errors(self, instance: Any) -> Iterator[ValidationError]:
        """``jsonschema``'s errors for ``instance`` (none without asking it when the fast path accepts)."""
        if self._fast_accepts(instance):
            return iter(())
        return self._slow.iter_errors(instance)

    def validate(self, instance: Any) -> None:
        """Raise ``jsonschema``'s best `ValidationError` when ``instance`` does not conform."""
        if not self._fast_accepts(instance):
            self._slow.validate(instance)


#: Distinct schemas whose compiled validators a process keeps (a suite has a few dozen; a proxy or a
#: fuzzer may see many more, so the cache is bounded).
CACHED_SCHEMAS = 1024


def compiled(schema: Mapping[str, Any]) -> CompiledSchema:
    """The `CompiledSchema` of ``schema``, built once per process for every equal schema.

    Every run (and every server, client and library in it) meets the same tools' schemas; compiling
    them again each time was a visible share of a short run's CPU. The cache is keyed by the schema's
    JSON, key order included (``jsonschema`` reports errors in the schema's keyword order, and error
    messages are stored), and compiles a private copy, so a caller that later changes its dict
    changes nothing here. A schema that is not JSON (say, a tuple inside) is compiled afresh every time.
    """
    key = _cache_key(schema)
    return CompiledSchema(schema) if key is None else _compiled(key)


@functools.lru_cache(maxsize=CACHED_SCHEMAS)
def _compiled(key: str) -> CompiledSchema:
    return CompiledSchema(json.loads(key))


def schema_error(schema: Mapping[str, Any]) -> SchemaError | None:
    """Why ``schema`` is not a valid Draft 2020-12 schema (``check_schema``'s error), or None.

    Checking a schema against the metaschema costs more than compiling it; the verdict is cached
    like `compiled`'s validators.
    """
    key = _cache_key(schema)
    return _check(schema) if key is None else _checked(key)


def _cache_key(schema: Mapping[str, Any]) -> str | None:
    """The JSON of ``schema`` (keys in its order), or None when JSON would not give it back unchanged.

    (Tuples, non-string keys and NaN change on the way through JSON: such a schema is not cached.)
    """
    try:
        key = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return key if json.loads(key) == schema else None


#: Keywords whose values ``jsonschema`` checks as URIs when an optional URI library is installed; a
#: schema using one is checked by ``jsonschema`` alone.
_URI_KEYWORDS = frozenset({"$id", "$schema", "$ref", "$dynamicRef", "$vocabulary"})


def _fast_meta_valid(schema: Any) -> bool:
    """Whether ``jsonschema_rs`` finds ``schema`` valid and nothing it does not check could differ.

    ``jsonschema_rs`` walks the metaschema in a fraction of ``jsonschema``'s time, but it does not
    compile ``pattern`` regexes as Python does (``jsonschema`` asserts the ``regex`` format there):
    every pattern is compiled here, and a schema with a URI keyword is left to ``jsonschema``.
    """
    if _rs is None or not isinstance(schema, Mapping):
        return False
    try:
        if not _rs.meta.is_valid(dict(schema)):
            return False
    except (ValueError, TypeError):  # not JSON-shaped
        return False
    pending: list[Any] = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, Mapping):
            if not _URI_KEYWORDS.isdisjoint(node):
                return False
            patterns = [node.get("pattern")]
            if isinstance(node.get("patternProperties"), Mapping):
                patterns.extend(node["patternProperties"])
            try:
                for pattern in patterns:
                    if isinstance(pattern, str):
                        re.compile(pattern)
            except re.error:
                return False
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return True


def _check(schema: Mapping[str, Any]) -> SchemaError | None:
    if _fast_meta_valid(schema):
        return None
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        return error
    return None


@functools.lru_cache(maxsize=CACHED_SCHEMAS)
def _checked(key: str) -> SchemaError | None:
    return _check(json.loads(key))


#: Characters of one schema message kept in an error (a message quotes the offending value in full).
MAX_MESSAGE_CHARS = 300


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


#: Problems gathered before the first few are picked by path: a megabyte of wrong items has hundreds
#: of thousands, and explaining every one of them took seconds.
GATHERED_PROBLEMS = 1000


def argument_problems(schema: CompiledSchema, arguments: Any, most: int = 5) -> str | None:
    """Where and how ``arguments`` break ``schema`` (the first ``most`` problems by path), or None.

    The problems are picked among the first `GATHERED_PROBLEMS` the validator meets.
    """
    if schema.is_valid(arguments):  # nearly every call: no error objects to build and sort
        return None
    gathered = itertools.islice(schema.iter_errors(arguments), GATHERED_PROBLEMS)
    errors = sorted(gathered, key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    return "; ".join(
        f"{'/'.join(map(str, e.absolute_path)) or '(arguments)'}: {shorten(e.message)}" for e in errors[:most]
    )
