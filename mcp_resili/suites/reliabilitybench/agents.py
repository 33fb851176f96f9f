"""ReliabilityBench's own scripted agent: a learner that changes its strategy by its reflections.

`LearnerAgent` (``scripted:learner``) exists to show that Reflexion's loop reaches the agent: without
a reflection of its own in memory it plays like ``scripted:naive`` (every step once, no retry);
asked to reflect on a failed trial it writes which calls failed without a retry and the lesson
`RETRY_LESSON`; a trial whose memory holds that lesson plays like ``scripted:oracle`` (retry each
failed step). Under ``--architecture react`` it never has a memory, so it never changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mcp_resili.agents.model import ModelRequest, ModelResponse
from mcp_resili.agents.scripted import NaiveAgent, OracleAgent, call_results

#: The lesson the learner draws from failed calls it did not retry, and acts on when it remembers it.
RETRY_LESSON = "Lesson: retry every failed call until it succeeds."


@dataclass(frozen=True)
class LearnerAgent:
    """Naive until its own reflection says to retry failed calls; then it retries them."""

    #: It answers without awaiting anything: the episode's time limit runs out only between turns.
    answers_at_once: ClassVar[bool] = True
    name: str = "scripted:learner"

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """A reflection when asked for one; else the next move of the strategy its memory selects."""
        if request.purpose == "reflect":
            return ModelResponse(text=reflection(request))
        if any(RETRY_LESSON in r.text for r in request.memory):
            return await OracleAgent(name=self.name).generate(request)
        return await NaiveAgent(name=self.name).generate(request)


def reflection(request: ModelRequest) -> str:
    """What the learner writes about its failed trial: the calls that failed, and its lesson."""
    failed = [
        f"{call.name} ({result.text[:80]})" for call, result in call_results(request) if result.is_error
    ]
    if not failed:
        return "No call failed, yet the end state was wrong: a result I relied on may have been stale."
    return f"These calls failed and I moved on without retrying them: {'; '.join(failed)}. {RETRY_LESSON}"
