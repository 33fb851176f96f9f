"""Agent programs and model-API faults in a run: ``run --agent-cmd`` and ``run --llm-faults``.

`session_factory` picks what plays a run's episodes in one process: `agent.AgentSession` (an agent
program per episode, docs/harnesses.md), `builtin.GatewaySession` (the built-in loop with its model
calls through the fault gateway), else the built-in `EpisodeSession`. ``bridge`` (stdio to an
episode's URL) must stay importable with the standard library alone: this module imports nothing
until `session_factory` is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_resili.client.executor import EpisodePlayer
    from mcp_resili.client.plan import RunPlan


def session_factory(plan: RunPlan, run_id: str, **options: Any) -> EpisodePlayer:
    """The session that plays ``plan``'s episodes (with `EpisodeSession`'s arguments)."""
    if plan.config.agent_cmd is not None:
        from mcp_resili.harness.agent import AgentSession

        return AgentSession(plan, run_id, **options)
    if plan.config.llm_faults is not None:
        from mcp_resili.harness.builtin import GatewaySession

        return GatewaySession(plan, run_id, **options)
    from mcp_resili.client.session import EpisodeSession

    return EpisodeSession(plan, run_id, **options)
