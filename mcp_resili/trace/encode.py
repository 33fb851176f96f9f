"""A trace line's JSON written by orjson: pydantic's own text, byte for byte, for a third of the work.

Writing the events out is the largest single cost of storing an episode: pydantic's serializer looks
up each value's type as it goes, some 50,000 instructions for a tool call's event. orjson writes the
same JSON for plain data (dicts with string keys, lists, tuples, strings, 64-bit integers, floats with
NaN and infinities as ``null``, booleans, None) in about a third of that.

A model is written as its fields' dict (its ``__dict__``) when its class is plain (`_plain_fields`):
no serializers of its own, no computed, excluded or extra fields, no aliases in its output, and
fields whose declared types pydantic writes just as orjson does. Each value of a field declared as a
number, string, boolean or model must have exactly that type (pydantic writes a float field's int as
``1.0`` and a model field's subclass with the declared class's fields only). Anything else stops
orjson (a datetime, a ``str`` subclass, an integer beyond 64 bits, a key that is not a string, a lone
surrogate, a model that is not plain) and the line is pydantic's own. `tests/test_trace_encode.py`
holds the two to the same bytes.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal, get_args, get_origin

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    PlainSerializer,
    PlainValidator,
    WrapValidator,
)
from pydantic.fields import FieldInfo

from mcp_resili.fastjson import PLAIN_JSON_ONLY
from mcp_resili.faults.base import dump_fault

#: Field types whose values are checked for their exact type before orjson writes them.
_SCALARS = (bool, int, float, str)
#: Per model class: its number of fields and its (field, exact types) checks; None if not plain.
_Plan = tuple[int, tuple[tuple[str, tuple[type, ...]], ...]] | None
_PLANS: dict[type, _Plan] = {}
_MAX_PLANS = 1024


def model_json(model: BaseModel) -> str:
    """``model.model_dump_json()``: the same text, by orjson when everything in it is plain."""
    try:
        return orjson.dumps(model, default=_plain_fields, option=PLAIN_JSON_ONLY).decode()
    except TypeError:  # orjson.JSONEncodeError is one: something pydantic writes its own way
        return model.model_dump_json()


def _plain_fields(value: Any) -> dict[str, Any]:
    """The hook orjson calls for a model: its fields, in order, if plain; `TypeError` for anything else."""
    cls = type(value)
    try:
        plan = _PLANS[cls]
    except KeyError:
        if len(_PLANS) >= _MAX_PLANS:  # classes made on the fly: keep the table bounded
            _PLANS.clear()
        plan = _PLANS[cls] = _plan(cls)
    if plan is None:
        raise TypeError(f"{type(value).__name__} is written by pydantic")
    fields = value.__dict__
    size, checks = plan
    for name, exact in checks:
        if type(fields[name]) not in exact:
            raise TypeError(f"{name} holds a {type(fields[name]).__name__}")
    # pydantic keeps a model's fields in its __dict__ in order; a key more is no field (model_copy
    # adds what it is given), which pydantic does not write.
    if len(fields) != size:
        raise TypeError("a key that is no field")
    return typing.cast(dict[str, Any], fields)


def _plan(cls: type) -> _Plan:
    """How to write ``cls``'s instances by orjson, or None when only pydantic writes them right."""
    if not isinstance(cls, type) or not issubclass(cls, BaseModel):
        return None
    config = cls.model_config
    decorators = cls.__pydantic_decorators__
    if (
        decorators.field_serializers
        or decorators.model_serializers
        or cls.model_computed_fields
        or cls.__pydantic_root_model__
        or config.get("extra") == "allow"
        or config.get("serialize_by_alias")
        or config.get("ser_json_inf_nan", "null") != "null"
        or config.get("json_encoders")
    ):
        return None
    checks: list[tuple[str, tuple[type, ...]]] = []
    for name, info in cls.model_fields.items():
        if info.exclude or getattr(info, "exclude_if", None) is not None:
            return None
        if not all(_plain_metadata(m) for m in info.metadata):
            return None
        exact = _exact_types(info.annotation)
        if exact is not None:
            checks.append((name, exact))
        elif not _plain_type(info.annotation):
            return None
    return len(cls.model_fields), tuple(checks)


def _plain_metadata(item: object) -> bool:
    """Field metadata that leaves the output to the value (a fault dumps its own fields)."""
    if isinstance(item, PlainSerializer):
        return item.func is dump_fault
    if isinstance(item, FieldInfo):  # e.g. a union's discriminator
        return not item.exclude and item.serialization_alias is None
    if isinstance(item, (PlainValidator, AfterValidator, BeforeValidator, WrapValidator)):
        return True
    return not hasattr(item, "__get_pydantic_core_schema__")  # constraints (``Ge``, ``MaxLen``) only


def _members(annotation: Any) -> tuple[Any, ...]:
    """A union's members (through ``Annotated`` whose metadata leaves the output alone), or the annotation."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return tuple(m for a in get_args(annotation) for m in _members(a))
    if (
        origin is Annotated
        and not _dumps_its_own_fields(annotation)
        and all(_plain_metadata(m) for m in annotation.__metadata__)
    ):
        return _members(get_args(annotation)[0])
    return (annotation,)


def _exact_types(annotation: Any) -> tuple[type, ...] | None:
    """The types a field's value must have exactly, for a field of numbers, strings, booleans or models.

    pydantic writes such a value by the field's declared type (a float field's int as ``1.0``, a
    model field's subclass instance with the declared class's fields only), orjson by the value's own.
    None for any other field (`_plain_type` decides those).
    """
    members = _members(annotation)
    if all(m in _SCALARS or m is type(None) or _is_model(m) for m in members):
        return tuple(members)
    return None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _plain_type(annotation: Any) -> bool:
    """Whether pydantic writes any value of ``annotation`` as orjson does, with nothing checked per value.

    Strings need no check (orjson refuses a subclass); numbers, booleans and models would, so inside a
    container only ``Any`` (written by the value's own type, as orjson does) and models' fault dump pass.
    """
    if annotation is Any or annotation is str or annotation is type(None):
        return True
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return all(_plain_metadata(m) for m in annotation.__metadata__) and (
            _dumps_its_own_fields(annotation) or _plain_type(args[0])
        )
    if origin is Literal:
        return all(type(a) in (str, int, bool) or a is None for a in args)
    if origin in (typing.Union, types.UnionType):
        return all(_plain_type(a) for a in args)
    if origin is dict:
        return args[0] is str and _plain_type(args[1])
    if origin in (list, tuple):
        return all(a is Ellipsis or _plain_type(a) for a in args)
    return False


def _dumps_its_own_fields(annotation: Any) -> bool:
    """A field of any fault (`Fault`): each value is written by its own class, as a model in ``Any`` is."""
    return any(isinstance(m, PlainSerializer) and m.func is dump_fault for m in annotation.__metadata__)
