"""What every fault and fault plan is given and must provide, and the registries of their types.

Faults and plans are data: pydantic models tagged by ``type`` (faults) or ``kind`` (plans). Defining a
subclass registers it under its tag, so a suite (or any package) adds a fault or plan type by defining
a class in a module its suite imports; traces and fault files name the tag and are parsed through the
registry (`parse_fault`, `parse_plan`). A suite's own types are known once its package is imported,
which resolving the suite does (`mcp_resili.registry.loader.get_suite`): the top that reads a trace
or a fault file resolves its suite first, and this layer never looks a suite up.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, PlainSerializer, PlainValidator, ValidationError

from mcp_resili.errors import UserError, error_path, shown_value
from mcp_resili.tools.spec import ToolSpec

if TYPE_CHECKING:
    from mcp_resili.tasks.model import Task


class FaultSpecError(UserError):
    """A fault SPEC, fault file or recorded fault that cannot be used; the message says what and where.

    ``problems`` lists (path inside the fault, what is wrong) when the error comes from a fault's
    fields, so that a plan holding the fault can name the full path.
    """

    def __init__(self, message: str, problems: list[tuple[tuple[int | str, ...], str]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


@dataclass(frozen=True)
class CallOutcome:
    """How an earlier call in the episode ended (the history fault rules look at)."""

    tool: str
    ok: bool


@dataclass(frozen=True)
class CallContext:
    """What a fault plan may know about a call when it decides.

    ``state`` is the episode's private scratch space for plans that remember (armed groups,
    cascades); plans themselves stay immutable data.
    """

    fault_key: str
    tool: ToolSpec
    ordinal: int
    history: Sequence[CallOutcome]
    task: Task | None = None
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolOutcome:
    """A call's result before it becomes an MCP ``CallToolResult``."""

    structured: dict[str, Any] | None
    error_code: str | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    #: The upstream's own result (a proxied ``CallToolResult``), forwarded as is while no fault touched it.
    upstream: Any = None
    #: The result's text as the agent reads it (`server.pipeline.result_text`), when the backend made it
    #: already; used only while no fault touched the call.
    text: str | None = None

    @property
    def is_error(self) -> bool:
        """True when the agent sees an error."""
        return self.error_code is not None


_FAULT_TYPES: dict[str, type[BaseFault]] = {}
_PLAN_KINDS: dict[str, type[BasePlan]] = {}


def _tag(cls: type[BaseModel], name: str) -> str | None:
    """The default of the tag field ``name`` (``type`` or ``kind``), or None for abstract bases."""
    info = cls.model_fields.get(name)
    return info.default if info is not None and isinstance(info.default, str) else None


class BaseFault(BaseModel):
    """A fault type. Subclasses set ``type: Literal[...] = "..."`` and implement `apply`.

    ``side="request"``: decided and applied before the tool runs (it does not run). ``"response"``:
    the tool runs (its side effect happens), then the fault transforms the result.
    ``delay_seconds`` is waited (times the server's time scale) before the outcome is returned.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: False for faults whose `apply` never draws (seeding a call's RNG is a measurable share of it).
    uses_rng: ClassVar[bool] = True
    explicit: bool = True
    transient: bool = True
    side: Literal["request", "response"] = "request"
    delay_seconds: float = 0.0

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        tag = _tag(cls, "type")
        if tag is not None:
            _FAULT_TYPES[tag] = cls

    def apply(self, outcome: ToolOutcome | None, call: CallContext, rng: random.Random) -> ToolOutcome:
        """The outcome the agent sees; ``outcome`` is None when the tool did not run."""
        raise NotImplementedError


class BasePlan(BaseModel):
    """A fault plan type. Subclasses set ``kind: Literal[...] = "..."`` and implement `decide`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: False for plans that never draw (seeding a call's RNG is a measurable share of a call's cost).
    uses_rng: ClassVar[bool] = True
    #: The suite whose tasks the plan needs (its faults live in that suite's task data), or None when
    #: it applies to any tools (a proxy's included).
    requires_suite: ClassVar[str | None] = None

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        tag = _tag(cls, "kind")
        if tag is not None:
            _PLAN_KINDS[tag] = cls

    def decide(self, call: CallContext, rng: random.Random) -> FaultDecision:
        """The ledger entry for ``call``, drawing only from ``rng``."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as recorded in trace headers (`parse_plan` reads it back)."""
        return self.model_dump(mode="json")


_Model = TypeVar("_Model", bound=BaseModel)


def _lookup(registry: dict[str, type[_Model]], tag: object, what: str, field_name: str) -> type[_Model]:
    known = ", ".join(sorted(registry)) or "none"
    if tag is None:
        raise FaultSpecError(f"a {what} needs a '{field_name}' (one of: {known})")
    if not isinstance(tag, str) or tag not in registry:
        raise FaultSpecError(
            f"unknown {what} {field_name} {tag!r}; known: {known} (a suite's own types are known once "
            "that suite is loaded)"
        )
    return registry[tag]


#: Pydantic error types in plain words (what was expected), by error type.
_EXPECTED = {
    "missing": "is required but missing",
    "extra_forbidden": "is not a known key",
    "string_type": "expected a string",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "dict_type": "expected a table/object",
    "model_type": "expected a table/object",
    "model_attributes_type": "expected a table/object",
}
_BOUNDS = {"gt": "greater than", "ge": "at least", "lt": "less than", "le": "at most"}


class _Problems(ValueError):
    """A nested fault's problems, kept apart so the enclosing error can name their full path."""

    def __init__(self, problems: list[tuple[tuple[int | str, ...], str]]) -> None:
        super().__init__("; ".join(f"{error_path(loc)}: {text}" for loc, text in problems))
        self.problems = problems


def _problems(exc: ValidationError) -> list[tuple[tuple[int | str, ...], str]]:
    """Each pydantic error as (where, what was expected, in plain words), nested faults expanded."""
    found: list[tuple[tuple[int | str, ...], str]] = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        kind = error["type"]
        context = error.get("ctx") or {}
        nested = context.get("error")
        if isinstance(nested, _Problems):
            found.extend((loc + inner, text) for inner, text in nested.problems)
            continue
        if kind in _EXPECTED:
            text = _EXPECTED[kind]
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            bound = next(iter(context.items()), ("", ""))
            text = f"must be {_BOUNDS.get(bound[0], bound[0])} {bound[1]}"
        elif kind == "value_error" and nested is not None:
            text = str(nested)
        else:
            text = error["msg"].replace("Input should be", "expected")
        if kind not in ("missing", "extra_forbidden", "value_error"):
            text += f" (got {shown_value(error['input'])})"
        found.append((loc, text))
    return found


def _plain(exc: ValidationError, what: str, model: type[BaseModel] | None = None) -> str:
    """A pydantic error in plain words: ``where: what was expected (got ...)``, no internals.

    An unknown top-level key of ``model`` is followed by the keys it does know.
    """
    known = f" (known keys: {', '.join(model.model_fields)})" if model is not None else ""
    unknown_key = _EXPECTED["extra_forbidden"]
    return "; ".join(
        f"{error_path(loc) or what}: {text}{known if len(loc) == 1 and text == unknown_key else ''}"
        for loc, text in _problems(exc)
    )


def parse_fault(raw: object) -> BaseFault:
    """A fault from its JSON form (``{"type": ..., ...}``), or `FaultSpecError` saying what is wrong."""
    if isinstance(raw, BaseFault):
        return raw
    if not isinstance(raw, dict):
        raise FaultSpecError(f"a fault must be a table/object with a 'type', got {raw!r}")
    try:
        cls = _lookup(_FAULT_TYPES, raw.get("type"), "fault", "type")
    except FaultSpecError as exc:
        raise FaultSpecError(str(exc), [(("type",), str(exc))]) from None
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        problems = _problems(exc)
        raise FaultSpecError(f"fault {raw.get('type')!r}: {_plain(exc, 'fault', cls)}", problems) from None


def parse_plan(raw: object) -> BasePlan:
    """A fault plan from its JSON form (``{"kind": ..., ...}``), or `FaultSpecError`."""
    if isinstance(raw, BasePlan):
        return raw
    if not isinstance(raw, dict):
        raise FaultSpecError(f"a fault plan must be a table/object with a 'kind', got {raw!r}")
    cls = _lookup(_PLAN_KINDS, raw.get("kind"), "fault plan", "kind")
    try:
        return cls.model_validate(raw)
    except ValidationError as exc:
        raise FaultSpecError(f"fault plan {raw.get('kind')!r}: {_plain(exc, 'plan', cls)}") from None


def _validator(parse: Callable[[object], _Model]) -> Callable[[object], _Model]:
    def validate(raw: object) -> _Model:
        try:
            return parse(raw)
        except FaultSpecError as exc:
            # pydantic reports ValueErrors as validation errors; the problems keep their own paths.
            raise _Problems(exc.problems or [((), str(exc))]) from None

    return validate


def dump_fault(model: BaseModel) -> dict[str, Any]:
    """A fault as its own class's fields (whatever the field that holds it declares)."""
    return model.model_dump(mode="json")


#: A field holding any registered fault (validated through the registry, dumped with its own fields).
Fault = Annotated[BaseFault, PlainValidator(_validator(parse_fault)), PlainSerializer(dump_fault)]


def fault_types() -> dict[str, type[BaseFault]]:
    """Every registered fault type by tag (the generic ones and those of the suites loaded so far)."""
    return dict(sorted(_FAULT_TYPES.items()))


def plan_kinds() -> dict[str, type[BasePlan]]:
    """Every registered plan kind by tag (the generic ones and those of the suites loaded so far)."""
    return dict(sorted(_PLAN_KINDS.items()))


class FaultDecision(BaseModel):
    """One entry of the injection ledger: what the plan decided for one call, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    plan: str
    ordinal: int
    roll: float | None = None
    success_probability: float | None = None
    rule: int | None = None
    reason: str | None = None
    fault: Fault | None = None

    @property
    def fired(self) -> bool:
        """True when a fault is injected into this call."""
        return self.fault is not None
