"""JSON, fast, with the careful library as the last word: the same values and text, for less CPU.

Reading: reports read every line of every stored trace and every stored score; `json.loads` spends
most of their CPU. msgspec's decoder builds the same values (dict, list, str, int, float, bool, None)
several times faster. Where it refuses text the standard library accepts (``NaN``, a lone surrogate
escape, an integer past 64 bits), `json.loads` decides, so what is read — and what is refused, with
`json.JSONDecodeError` — is exactly what `json.loads` gives.

Writing: orjson, handed only JSON's own types (`PLAIN_JSON_ONLY`), writes what pydantic writes for
them (`trace.encode`, `jsonable`); whatever it stops at is left to pydantic.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import orjson
from pydantic_core import to_jsonable_python

#: orjson options that hand it only JSON's own types: subclasses of them, datetimes and dataclasses go
#: to its ``default`` (which, when none is given, makes it stop with a `TypeError`).
PLAIN_JSON_ONLY = (
    orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)

_decode = msgspec.json.Decoder().decode


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``, computed by msgspec whenever it can read ``text``."""
    try:
        return _decode(text)
    except (msgspec.DecodeError, UnicodeEncodeError):  # the latter: a raw lone surrogate in ``text``
        return json.loads(text)


def jsonable(value: Any) -> Any:
    """``to_jsonable_python(value, by_alias=True, exclude_none=True)``, by an orjson round trip where equal.

    For plain JSON data both give a copy with tuples as lists (``exclude_none`` leaves a dict's items
    alone); the round trip costs less. A ``null`` in its text (a None, or a NaN or an infinity, which
    orjson writes so) and anything orjson stops at go to pydantic, which keeps them as they are.
    """
    try:
        encoded = orjson.dumps(value, option=PLAIN_JSON_ONLY)
    except TypeError:  # orjson's JSONEncodeError
        encoded = b"null"
    if encoded.find(b"null") >= 0:  # not ``in``, which first builds a TypeError (`server.numbers`)
        return to_jsonable_python(value, by_alias=True, exclude_none=True)
    return orjson.loads(encoded)
