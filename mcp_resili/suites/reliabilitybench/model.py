"""ReliabilityBench task data: the initial state, the end-state predicate and the request's parts.

They live inside the generic `Task` (``metadata`` and ``expected_outputs``) and are validated here,
so the shared task schema stays one schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcp_resili.tasks.model import Task


class StateCheck(BaseModel):
    """One clause of the end-state predicate.

    ``path`` walks the final state key by key. ``op``: ``eq`` (the value there equals ``value``,
    after dropping the ``ignore`` keys from both sides when both are objects: free-text fields the
    agent words itself), ``keys`` (the object there has exactly the keys ``value``), ``absent`` (the
    path does not exist).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: tuple[str, ...]
    op: Literal["eq", "keys", "absent"] = "eq"
    value: Any = None
    ignore: tuple[str, ...] = ()


class Expected(BaseModel):
    """``Task.expected_outputs`` of a ReliabilityBench task: every check must hold."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    checks: tuple[StateCheck, ...] = Field(min_length=1)


class Clause(BaseModel):
    """One sentence of the request in three wordings; ``{slot}`` placeholders name `Request.slots`.

    A wording may mark one constraint phrase as ``[...]`` (``Book a meeting about '{topic}'[ on
    {date}].``): the ``reorder`` relation states it first, and otherwise the brackets are dropped.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    active: str
    paraphrase: str
    passive: str
    #: Earlier clauses (by index) this one names something of ("the booking", "the '...' ticket"):
    #: they must be read before it.
    refers_to: tuple[int, ...] = ()
    #: The gold workflow's steps (ids) this clause asks for; a numbered request must list them in an
    #: order the workflow allows.
    steps: tuple[str, ...] = ()


class Correction(BaseModel):
    """The slot a mid-task correction first gets wrong (``decoy``), then corrects."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    slot: str
    label: str
    decoy: str


class Request(BaseModel):
    """The request as parts, so metamorphic relations can re-render it without changing its meaning."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    clauses: tuple[Clause, ...] = Field(min_length=2)
    slots: dict[str, str]
    #: Slots holding an ISO date (YYYY-MM-DD) or a 24-hour time (HH:MM).
    dates: tuple[str, ...] = ()
    times: tuple[str, ...] = ()
    correction: Correction

    @model_validator(mode="after")
    def _references_point_back(self) -> Request:
        for index, clause in enumerate(self.clauses):
            if any(not 0 <= earlier < index for earlier in clause.refers_to):
                raise ValueError(f"clause {index} may refer only to earlier clauses, got {clause.refers_to}")
        return self


class Details(BaseModel):
    """``Task.metadata`` of a ReliabilityBench task."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    domain: Literal["scheduling", "travel", "support", "ecommerce"]
    level: Literal[1, 2]
    pattern: str
    initial_state: dict[str, Any]
    request: Request
    generator_seed: int


def details(task: Task) -> Details:
    """The validated ReliabilityBench metadata of ``task``."""
    return Details.model_validate(task.metadata)


def expected(task: Task) -> Expected:
    """The validated end-state predicate of ``task``."""
    return Expected.model_validate(task.expected_outputs)
