"""The contract between the runner and an agent program: what it is given, by name (docs/harnesses.md).

These names are a promise: an agent program written against them keeps working. Per episode the
runner starts the program with the task prompt on its standard input and this environment:

* `TASK_PROMPT` (``MCP_RESILI_TASK_PROMPT``): the prompt, as on stdin;
* `MCP_URL` (``MCP_RESILI_MCP_URL``): a Streamable HTTP URL on loopback with the episode already bound
  (a client that knows nothing of episodes just connects);
* `MCP_COMMAND` (``MCP_RESILI_MCP_COMMAND``): the same server as a stdio command line;
* ``OPENAI_BASE_URL`` and ``ANTHROPIC_BASE_URL``: the model API (through the fault gateway), in the form
  each SDK reads from its environment;
* `MODEL` (``MCP_RESILI_MODEL``): the model name to ask for;
* ``OPENAI_API_KEY`` and ``ANTHROPIC_API_KEY``: placeholders offline; with a real upstream, the user's
  own key as the runner's environment has it (never written to a trace, a log or the store).

Besides (informational, also kept): `EPISODE` (the episode id), `TIME_LIMIT` (seconds the episode may
take), `MAX_TURNS` (its call budget).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TASK_PROMPT = "MCP_RESILI_TASK_PROMPT"
MCP_URL = "MCP_RESILI_MCP_URL"
MCP_COMMAND = "MCP_RESILI_MCP_COMMAND"
MODEL = "MCP_RESILI_MODEL"
OPENAI_BASE_URL = "OPENAI_BASE_URL"
ANTHROPIC_BASE_URL = "ANTHROPIC_BASE_URL"
OPENAI_API_KEY = "OPENAI_API_KEY"
ANTHROPIC_API_KEY = "ANTHROPIC_API_KEY"
EPISODE = "MCP_RESILI_EPISODE"
TIME_LIMIT = "MCP_RESILI_TIME_LIMIT"
MAX_TURNS = "MCP_RESILI_MAX_TURNS"

#: Every name the runner sets, in the order docs list them.
CONTRACT = (
    TASK_PROMPT,
    MCP_URL,
    MCP_COMMAND,
    OPENAI_BASE_URL,
    ANTHROPIC_BASE_URL,
    MODEL,
    OPENAI_API_KEY,
    ANTHROPIC_API_KEY,
    EPISODE,
    TIME_LIMIT,
    MAX_TURNS,
)
#: The keys an agent program gets when its model API is the offline model server: never a real one.
PLACEHOLDER_KEY = "mcp-resili-offline"
#: Variables of the runner's environment an agent program does not inherit: other SDKs' endpoint
#: settings, which would send its calls around the gateway.
NOT_INHERITED = ("OPENAI_API_BASE", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "ANTHROPIC_AUTH_TOKEN")
#: Shown in place of a secret found in what an agent program printed.
REDACTED = "[redacted]"


@dataclass(frozen=True)
class EpisodeEndpoints:
    """Where one episode's agent program finds its MCP server and its model API."""

    mcp_url: str
    mcp_command: str
    #: The model API's base, without ``/v1`` (Anthropic's form; OpenAI's adds ``/v1``).
    model_base: str


def agent_environment(
    inherited: Mapping[str, str],
    endpoints: EpisodeEndpoints,
    *,
    prompt: str,
    model: str,
    episode: str,
    time_limit: float,
    max_turns: int,
    offline: bool,
) -> dict[str, str]:
    """The environment of one episode's agent program: the runner's own, plus the contract's names.

    Offline the API keys are placeholders, whatever the runner's environment holds: a key is never
    sent where it is not needed.
    """
    env = {k: v for k, v in inherited.items() if k not in NOT_INHERITED}
    env.update(
        {
            TASK_PROMPT: prompt,
            MCP_URL: endpoints.mcp_url,
            MCP_COMMAND: endpoints.mcp_command,
            OPENAI_BASE_URL: f"{endpoints.model_base}/v1",
            ANTHROPIC_BASE_URL: endpoints.model_base,
            MODEL: model,
            EPISODE: episode,
            TIME_LIMIT: f"{time_limit:g}",
            MAX_TURNS: str(max_turns),
        }
    )
    for key in (OPENAI_API_KEY, ANTHROPIC_API_KEY):
        if offline or not env.get(key):
            env[key] = PLACEHOLDER_KEY
    return env


def secrets_in(env: Mapping[str, str]) -> tuple[str, ...]:
    """The API keys in ``env`` that are real (not our placeholder): what must never reach a trace."""
    found = (env.get(OPENAI_API_KEY, ""), env.get(ANTHROPIC_API_KEY, ""))
    return tuple(key for key in found if len(key) >= 8 and key != PLACEHOLDER_KEY)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret in ``secrets`` replaced by `REDACTED`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text
