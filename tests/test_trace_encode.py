"""orjson writes what pydantic writes: `model_json` an event's text, `fastjson.jsonable` a JSON form."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, computed_field, field_serializer
from pydantic_core import to_jsonable_python

from mcp_resili.client.inprocess import call_params
from mcp_resili.fastjson import jsonable
from mcp_resili.faults.base import FaultDecision, fault_types
from mcp_resili.faults.error import ErrorFault
from mcp_resili.faults.model_api import ModelFaultDecision, RateLimited
from mcp_resili.trace import encode
from mcp_resili.trace.encode import model_json
from mcp_resili.trace.model import (
    EpisodeEndEvent,
    ModelFaultEvent,
    ModelTurnEvent,
    ToolCallEvent,
    TraceHeader,
)


class Color(enum.Enum):
    RED = "red"


class Text(str):
    """A str subclass: pydantic and orjson would not agree on it without the check."""


@dataclasses.dataclass
class Point:
    x: int


class Inner(BaseModel):
    n: int = 1


_odd_scalars = st.sampled_from(
    [
        float("nan"),
        float("inf"),
        -0.0,
        1e16,
        5e-324,
        2**64,
        -(2**63) - 1,
        "\u2028 line",
        "\ud800",  # a lone surrogate
        Text("sub"),
        Color.RED,
        datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC),
        b"bytes",
        frozenset({1}),
        Point(1),
        Inner(),
        (1, "two"),
    ]
)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=20), _odd_scalars
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.one_of(st.text(max_size=5), st.integers(0, 3)), inner, max_size=4)
    ),
    max_leaves=12,
)
_arguments = st.dictionaries(st.text(max_size=8), _values, max_size=4)


def same_text(model: BaseModel) -> None:
    """``model_json`` gives pydantic's text, or fails as pydantic does."""
    try:
        expected = model.model_dump_json()
    except Exception as exc:  # whatever pydantic raises, model_json must raise too
        with pytest.raises(type(exc)):
            model_json(model)
        return
    assert model_json(model) == expected


@settings(max_examples=400, derandomize=True, deadline=None)
@given(arguments=_arguments, result=st.one_of(st.none(), _arguments), roll=st.floats())
def test_a_tool_call_event_holding_anything_is_written_as_pydantic_writes_it(
    arguments: dict[str, Any], result: dict[str, Any] | None, roll: float
) -> None:
    decision = FaultDecision(
        plan="p", ordinal=3, roll=roll, success_probability=0.5, fault=ErrorFault(code="X")
    )
    event = ToolCallEvent(
        episode="e",
        seq=1,
        tool="t",
        arguments=arguments,
        fault=decision.fault,
        decision=decision,
        is_error=result is None,
        result=result,
    )
    same_text(event)


@settings(max_examples=150, derandomize=True, deadline=None)
@given(calls=st.lists(_arguments, max_size=3), text=st.text(max_size=30))
def test_model_turns_and_headers_holding_anything_are_written_as_pydantic_writes_them(
    calls: list[dict[str, Any]], text: str
) -> None:
    same_text(ModelTurnEvent(episode="e", turn=1, text=text, tool_calls=tuple(calls)))
    plan = calls[0] if calls else {}
    same_text(TraceHeader(suite="s", task=None, episode="e", seed=1, fault_plan=plan, fault_key="k"))


def test_every_fault_type_and_a_model_fault_decision_are_written_the_fast_way_and_alike() -> None:
    for cls in fault_types().values():
        fault = cls.model_validate({}) if _all_defaults(cls) else None
        if fault is not None:
            same_text(ToolCallEvent(episode="e", seq=1, tool="t", arguments={}, fault=fault, is_error=True))
            assert encode._PLANS[cls] is not None, cls.__name__
    decision = ModelFaultDecision(plan="llm", ordinal=2, roll=0.25, fault=RateLimited())
    same_text(
        ModelFaultEvent(episode="e", ordinal=2, api="openai", stream=False, decision=decision, status=429)
    )
    assert encode._PLANS[ModelFaultDecision] is not None


def _all_defaults(cls: type[BaseModel]) -> bool:
    return all(not info.is_required() for info in cls.model_fields.values())


def test_values_set_apart_from_validation_fall_back_to_pydantic() -> None:
    """An int in a float field, a subclass in a model field, a str subclass: pydantic's text each time."""
    decision = FaultDecision(plan="p", ordinal=0, roll=0.5)
    int_roll = decision.model_copy(update={"roll": 1})  # pydantic writes 1.0, orjson would write 1
    same_text(int_roll)
    assert '"roll":1.0' in int_roll.model_dump_json()

    class Wider(FaultDecision):
        extra_field: str = "hidden"

    wider = Wider(plan="p", ordinal=0)
    same_text(ToolCallEvent(episode="e", seq=1, tool="t", arguments={}, decision=wider, is_error=False))
    same_text(ToolCallEvent.model_construct(episode=Text("e"), seq=True, tool="t", arguments={}, is_error=0))
    with_a_stray_key = decision.model_copy(update={"stray": 1})  # in __dict__, not a field
    same_text(with_a_stray_key)
    assert "stray" not in with_a_stray_key.model_dump_json()


def test_models_that_write_themselves_their_own_way_are_left_to_pydantic() -> None:
    class Aliased(BaseModel):
        model_config = ConfigDict(serialize_by_alias=True)
        name: str = Field("x", serialization_alias="Name")

    class Computed(BaseModel):
        n: int = 2

        @computed_field  # type: ignore[prop-decorator]
        @property
        def double(self) -> int:
            return self.n * 2

    class Serialized(BaseModel):
        when: str = "now"

        @field_serializer("when")
        def _upper(self, value: str) -> str:
            return value.upper()

    class Excluded(BaseModel):
        shown: int = 1
        hidden: int = Field(2, exclude=True)

    class Checked(BaseModel):
        n: Annotated[int, AfterValidator(abs)] = 1
        counts: list[int] = [1]
        stamp: datetime.date = datetime.date(2026, 1, 1)

    for cls in (Aliased, Computed, Serialized, Excluded):
        same_text(cls())
        assert encode._PLANS[cls] is None, cls.__name__
    same_text(Checked())
    assert encode._PLANS[Checked] is None  # a list of ints, a date: per-value checks it cannot make
    same_text(EpisodeEndEvent(episode="e", termination="completed", turns=1))


def test_a_plain_event_never_reaches_pydantics_serializer(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: BaseModel, **kwargs: Any) -> str:
        raise AssertionError(f"{type(self).__name__} went to pydantic")

    event = ToolCallEvent(
        episode="e",
        seq=1,
        tool="t",
        arguments={"records": [{"id": 1, "v": 2.5}], "label": "é\u2028"},
        fault=ErrorFault(code="TIMEOUT"),
        decision=FaultDecision(plan="p", ordinal=0, roll=0.1, success_probability=0.8),
        is_error=True,
        result={"code": "TIMEOUT"},
    )
    expected = event.model_dump_json()
    monkeypatch.setattr(BaseModel, "model_dump_json", refuse)
    assert model_json(event) == expected


@settings(max_examples=300, derandomize=True, deadline=None)
@given(meta=st.dictionaries(st.text(max_size=6), _values, max_size=4))
def test_a_calls_meta_takes_the_json_form_the_sdks_dump_gives(meta: dict[str, Any]) -> None:
    """The in-process client's ``_meta`` (`call_params`): what the SDK's request model would dump."""
    ours = call_params("t", None, meta)["_meta"]
    expected = to_jsonable_python(meta, by_alias=True, exclude_none=True)
    assert repr(ours) == repr(expected)  # NaN included, which == would not call equal
    assert type(ours) is dict and ours is not meta
    assert jsonable(meta) is not meta
