"""Model specs → model instances, behind the one `Model` interface.

Specs are ``PROVIDER:MODEL``: ``scripted:oracle``, ``anthropic:claude-…``, ``openai:gpt-…``; an
OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio) is ``openai:MODEL`` with ``base_url``.
Provider SDKs are imported only when a model of theirs is created.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from mcp_resili.agents.model import Model
from mcp_resili.agents.scripted import SCRIPTED_AGENTS
from mcp_resili.client.providers.keys import API_KEY_ENV
from mcp_resili.client.providers.options import (
    MissingAPIKeyError,
    ProviderOptions,
    api_key,
)
from mcp_resili.client.providers.retry import ProviderFailure, RetryPolicy, Sleeper
from mcp_resili.errors import UserError

HOSTED_PROVIDERS = ("anthropic", "openai")

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_MODELS",
    "HOSTED_PROVIDERS",
    "ClosableModel",
    "MissingAPIKeyError",
    "ProviderFailure",
    "ProviderOptions",
    "RetryPolicy",
    "Sleeper",
    "UnknownModelError",
    "create_model",
    "provider_of",
    "validate_model_spec",
]


#: The models a run plays when none are named.
DEFAULT_MODELS = ("scripted:oracle", "scripted:naive")


class UnknownModelError(UserError):
    """A model spec no provider understands."""


@runtime_checkable
class ClosableModel(Protocol):
    """A model that holds a connection pool to close at the end of a run."""

    async def aclose(self) -> None:
        """Release the model's resources."""
        ...


#: Scripted agent name -> factory: a suite's own, handed down by the caller (the generic ones,
#: `SCRIPTED_AGENTS`, are always there).
Agents = Mapping[str, Callable[[], Model]]
_NONE: Agents = {}


def _available(agents: Agents) -> str:
    return ", ".join([f"scripted:{n}" for n in sorted(agents)] + [f"{p}:MODEL" for p in HOSTED_PROVIDERS])


def provider_of(spec: str) -> str:
    """The provider part of a model spec (``anthropic`` for ``anthropic:claude-x``)."""
    return spec.partition(":")[0]


def validate_model_spec(spec: str, *, base_url: str | None = None, agents: Agents = _NONE) -> None:
    """Check a spec without creating anything: a known provider, a model name, a key where needed.

    ``text:INNER`` is model ``INNER`` driven through the paper's text protocol; ``scripted:NAME`` one
    of the generic agents or of ``agents`` (the run's suite's own, as the caller hands them down).
    """
    agents = {**SCRIPTED_AGENTS, **agents}
    if not spec.isprintable() or spec != spec.strip():
        # A spec names a model in tables, ids and stderr: control characters (an escape sequence, a
        # newline) or edge spaces are a mistake, and would reach the terminal raw.
        raise UnknownModelError(f"model spec {spec!r} has control characters or edge spaces")
    provider, sep, name = spec.partition(":")
    if provider == "text":
        validate_model_spec(name, base_url=base_url, agents=agents)
        return
    if provider == "scripted" and name in agents:
        return
    if provider == "scripted":
        raise UnknownModelError(
            f"unknown scripted agent {name!r} in {spec!r}; available: {_available(agents)}"
        )
    if provider not in HOSTED_PROVIDERS or not sep or not name:
        raise UnknownModelError(f"unknown model spec {spec!r}; available: {_available(agents)}")
    api_key(provider, base_url)  # raises MissingAPIKeyError naming the variable


def create_model(spec: str, *, agents: Agents = _NONE, **options: Any) -> Model:
    """Instantiate the model named by ``spec``; ``options`` are `ProviderOptions` fields.

    ``agents``: the scripted agents to choose from (as for `validate_model_spec`). Scripted agents
    ignore the options. Hosted models take their key from the environment only.
    """
    validate_model_spec(spec, base_url=options.get("base_url"), agents=agents)
    agents = {**SCRIPTED_AGENTS, **agents}
    provider, _, name = spec.partition(":")
    if provider == "text":
        from mcp_resili.agents.text_protocol import TextProtocolModel

        return TextProtocolModel(create_model(name, agents=agents, **options))
    if provider == "scripted":
        return agents[name]()
    settings = ProviderOptions(**options)
    if provider == "anthropic":
        from mcp_resili.client.providers.anthropic import AnthropicModel

        return AnthropicModel(name, settings)
    from mcp_resili.client.providers.openai import OpenAIModel

    return OpenAIModel(name, settings)
