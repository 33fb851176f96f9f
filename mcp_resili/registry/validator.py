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

from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

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
