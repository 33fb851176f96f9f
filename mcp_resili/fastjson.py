"""JSON text to Python values, fast: msgspec's decoder, with the standard library's as the last word.

Reports read every line of every stored trace and every stored score; `json.loads` spends most of
their CPU. msgspec's decoder builds the same values (dict, list, str, int, float, bool, None) several
times faster. Where it refuses text the standard library accepts (``NaN``, a lone surrogate escape,
an integer past 64 bits), `json.loads` decides, so what is read — and what is refused, with
`json.JSONDecodeError` — is exactly what `json.loads` gives.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_decode = msgspec.json.Decoder().decode


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``, computed by msgspec whenever it can read ``text``."""
    try:
        return _decode(text)
    except (msgspec.DecodeError, UnicodeEncodeError):  # the latter: a raw lone surrogate in ``text``
        return json.loads(text)
