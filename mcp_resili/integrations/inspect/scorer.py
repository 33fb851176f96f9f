"""The scorer: the suite's own scorer on the trace our server recorded for the sample's episode.

The server-side trace is the source of truth: tool results carry no fault decision, and inspect keeps
only their text. One thing the server never sees: inspect checks each call's arguments against the
tool's schema (and its name against the tool list) itself and answers a bad call without sending it.
Our server would have refused that call too (``INVALID_INPUT``, ``UNKNOWN_TOOL``, no fault drawn), so
the scorer puts such calls back where the agent made them (`with_client_rejections`): the trace then
reads as ``mcp-resili run``'s would, and so does the score.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inspect_ai.model import ChatMessage, ChatMessageAssistant, ChatMessageTool
from inspect_ai.scorer import Metric, Score, Scorer, Target, mean, scorer
from inspect_ai.solver import TaskState

from mcp_resili.integrations.inspect.episode import EPISODE_KEY, OUTCOME_KEY, Outcome, SampleEpisode
from mcp_resili.integrations.inspect.metrics import pass_hat_k, suite_metrics

if TYPE_CHECKING:
    from mcp_resili.trace.model import Trace, TraceEvent


def with_client_rejections(trace: Trace, messages: Sequence[ChatMessage]) -> Trace:
    """``trace`` with the calls inspect refused before they reached the server put back in order.

    Walks the sample's tool results: a ``parsing`` error (inspect's own refusal) becomes the event our
    server would have recorded; any other result takes the server's next event for that tool. Discovery
    tools are skipped (the server records none). Events are renumbered 1, 2, ...
    """
    from mcp_resili.constants import DISCOVERY_TOOLS, FINISH_TOOL
    from mcp_resili.trace.model import FinishEvent

    recorded = list(trace.events)
    arguments = {
        call.id: dict(call.arguments)
        for message in messages
        if isinstance(message, ChatMessageAssistant)
        for call in message.tool_calls or ()
    }
    merged: list[TraceEvent] = []
    for message in messages:
        if not isinstance(message, ChatMessageTool) or message.function in DISCOVERY_TOOLS:
            continue
        if message.error is not None and message.error.type == "parsing":
            merged.append(
                _refused(trace.header.episode, message, arguments.get(message.tool_call_id or "", {}))
            )
            continue
        if recorded:
            tool = FINISH_TOOL if isinstance(recorded[0], FinishEvent) else getattr(recorded[0], "tool", None)
            if tool == message.function:
                merged.append(recorded.pop(0))
    merged.extend(recorded)
    events = tuple(e.model_copy(update={"seq": n}) for n, e in enumerate(merged, 1))
    return trace.model_copy(update={"events": events})


def _refused(episode: str, message: ChatMessageTool, arguments: dict[str, Any]) -> TraceEvent:
    """The event our server records for a call it refuses: unknown tool, or invalid arguments."""
    from mcp_resili.trace.codes import INVALID_INPUT, UNKNOWN_TOOL
    from mcp_resili.trace.model import ToolCallEvent

    assert message.error is not None  # only called for refused calls
    unknown = message.error.message == f"Tool {message.function} not found"
    code = UNKNOWN_TOOL if unknown else INVALID_INPUT
    return ToolCallEvent(
        episode=episode,
        seq=0,
        tool=message.function or "",
        arguments=arguments,
        is_error=True,
        error_code=code,
        result={"code": code, "message": message.error.message},
    )


def episode_trace(
    episode: SampleEpisode, messages: Sequence[ChatMessage], outcome: Outcome | None, model: str
) -> Trace:
    """The episode's whole trace: the server's record, inspect's refusals, and how the loop ended.

    An episode that made no call has no trace file: its header is built here. An unreadable file
    raises `TraceError` (the sample errors: an infrastructure failure is never the agent's).
    """
    from mcp_resili.faults import parse_fault_spec
    from mcp_resili.registry.loader import get_suite, spec_scope
    from mcp_resili.trace.model import EpisodeEndEvent, Trace, TraceHeader

    path = Path(episode.trace_dir) / f"{episode.id}.jsonl"
    if path.exists():
        trace = Trace.read(path)
    else:
        suite = get_suite(episode.suite)
        plan = {} if episode.faults is None else parse_fault_spec(episode.faults, spec_scope(suite)).to_dict()
        header = TraceHeader(
            suite=episode.suite,
            task=episode.task,
            episode=episode.id,
            seed=episode.seed,
            fault_plan=plan,
            fault_key=episode.fault_key,
            trial=episode.trial,
        )
        trace = Trace(header=header)
    trace = with_client_rejections(trace, messages)
    # What the runner's header holds and our server cannot know: the runner sets these (`play_planned`).
    update: dict[str, Any] = {
        "variant": episode.variant,
        "model": model,
        "max_turns": episode.max_turns_override,
    }
    if outcome is not None:
        end = EpisodeEndEvent(
            episode=episode.id,
            termination=outcome.termination,  # type: ignore[arg-type]
            turns=outcome.turns,
            detail=outcome.detail,
            stop_rules=outcome.stop_rules,
            stop_rule=outcome.stop_rule,
        )
        return Trace(header=trace.header.model_copy(update=update), events=(*trace.events, end))
    return Trace(header=trace.header.model_copy(update=update), events=trace.events)


def resili_metrics(suite_summary: bool = True) -> list[Metric | dict[str, list[Metric]]]:
    """The metrics of `resili_scorer`: means of the value keys, pass^k, and the suite's own summary.

    ``suite_summary=False`` leaves out `suite_metrics` (a suite without ``summarize`` would show an
    empty group).
    """
    means: dict[str, list[Metric]] = {"value": [mean()], "full": [mean()], "partial": [mean()]}
    return [means, pass_hat_k(), *([suite_metrics()] if suite_summary else [])]


@scorer(metrics=resili_metrics())
def resili_scorer() -> Scorer:
    """Score the sample's episode with its suite's own scorer (``mcp-resili score`` on its trace).

    The value is ``{"value", "full", "partial"}`` (the suite's value; 1.0 when the label is full,
    resp. partial); the answer is the label; the metadata holds our whole score, the episode and its
    trace (so ``inspect view`` shows every call with its fault decision).

    An episode that ended as ``infrastructure_error`` is a sample error (see `resili_agent`); scored
    anyway (``--score-on-error``), it gets no score, as ``mcp-resili run`` gives it none.
    """

    async def score(state: TaskState, target: Target) -> Score | None:
        from mcp_resili.registry.loader import get_suite
        from mcp_resili.scoring.coping import score_episode
        from mcp_resili.trace.model import event_to_dict

        episode = SampleEpisode.from_store(state.store.get(EPISODE_KEY))
        outcome = Outcome.from_store(state.store.get(OUTCOME_KEY))
        if outcome is not None and outcome.termination == "infrastructure_error":
            return None  # void: the model API failed, not the agent
        suite = get_suite(episode.suite)
        trace = episode_trace(episode, state.messages, outcome, str(state.model))
        ours = score_episode(suite, suite.task(episode.task), trace)
        return Score(
            value={
                "value": ours.value,
                "full": float(ours.label == "full"),
                "partial": float(ours.label == "partial"),
            },
            answer=ours.label,
            explanation="; ".join(ours.reasons) or ours.label,
            metadata={
                "label": ours.label,
                "score": ours.model_dump(mode="json"),
                "suite": episode.suite,
                "task": episode.task,
                "trial": episode.trial,
                "episode": episode.id,
                "fault_key": trace.header.fault_key,
                "faults": episode.faults,
                "variant": episode.variant,
                "model": str(state.model),
                "termination": None if outcome is None else outcome.termination,
                "stop_rule": None if outcome is None else outcome.stop_rule,
                "trace": {
                    "header": trace.header.model_dump(mode="json"),
                    "events": [event_to_dict(e) for e in trace.events],
                },
            },
        )

    return score
