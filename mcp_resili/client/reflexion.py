"""Reflexion (Shinn et al., 2023): the memory a trial starts with, and the reflection a failed one writes."""

from __future__ import annotations

from collections.abc import Sequence

from mcp_resili.agents.model import (
    REFLECTION_CHARS,
    ContextWindowExceededError,
    InfrastructureError,
    Model,
    ModelRequest,
    Reflection,
    UserMessage,
)
from mcp_resili.client.episode import EpisodeOutcome, EpisodeSpec
from mcp_resili.trace import (
    ReflectionEvent,
)


def with_memory(prompt: str, memory: Sequence[Reflection]) -> str:
    """The first user message of a Reflexion trial: the prompt, then the reflections it starts with."""
    if not memory:
        return prompt
    notes = "\n".join(f"{n}. (after attempt {r.trial + 1}) {r.text}" for n, r in enumerate(memory, 1))
    return (
        f"{prompt}\n\nYou have attempted this same task before and failed. Your reflections on "
        f"those attempts, oldest first:\n{notes}\nUse them to succeed this time."
    )


def reflection_prompt(termination: str, stop_rule: str | None) -> str:
    """Reflexion's request for a self-reflection after a failed trial (binary feedback only)."""
    ended = f"{termination} (stop rule {stop_rule})" if stop_rule else termination
    return (
        "Your attempt is over and it failed: a check of the final state shows the task was not "
        f"accomplished (the episode ended: {ended}). Do not call any tool now. In a few sentences, "
        "diagnose what went wrong and write a concrete plan for your next attempt at this same task, "
        "which will start from the same initial state."
    )


async def reflect(model: Model, episode: EpisodeSpec, outcome: EpisodeOutcome, trial: int) -> ReflectionEvent:
    """Ask ``model`` to reflect on the failed trial ``outcome`` (a real model turn); the event keeps it.

    The model sees the whole trial and a request to reflect, with the trial's tools still defined
    (providers reject tool results without them) but any tool call ignored. A provider failure gives
    an event with ``error`` and no text (the next trial then starts without this reflection).
    """
    request = ModelRequest(
        messages=(*outcome.messages, UserMessage(reflection_prompt(outcome.termination, outcome.stop_rule))),
        tools=outcome.tools,
        task=episode.task,
        max_turns=episode.max_turns,
        purpose="reflect",
        memory=episode.memory,
    )
    try:
        response = await model.generate(request)
    except (InfrastructureError, ContextWindowExceededError) as exc:
        return ReflectionEvent(episode=episode.id, role="written", from_trial=trial, text="", error=str(exc))
    return ReflectionEvent(
        episode=episode.id,
        role="written",
        from_trial=trial,
        text=response.text.strip()[:REFLECTION_CHARS],
        input_tokens=response.input_tokens,
        output_tokens=response.output_tokens,
    )
