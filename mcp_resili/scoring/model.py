"""What every scorer returns: a label, a value and named components, with the judge's reasons."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Score(BaseModel):
    """The score of one episode. Pure data: computed from (task, trace) alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    suite: str
    task: str
    label: str
    value: float
    components: dict[str, float | int | bool | str | None]
    reasons: tuple[str, ...] = ()
