"""Model specs → model instances, behind the one `Model` interface.

Specs are ``PROVIDER:MODEL``: ``scripted:oracle``, ``anthropic:claude-…``, ``openai:gpt-…``; an
OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio) is ``openai:MODEL`` with ``base_url``.
Provider SDKs are imported only when a model of theirs is created.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from mcp_resili.client.model import Model
from mcp_resili.client.providers.keys import API_KEY_ENV
from mcp_resili.client.providers.options import (
    MissingAPIKeyError,
    ProviderOptions,
    api_key,
)
from mcp_resili.client.providers.retry import ProviderFailure, RetryPolicy, Sleeper
from mcp_resili.client.scripted import SCRIPTED_AGENTS
from mcp_resili.errors import UserError
from mcp_resili.registry.suites import load_all_suites

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
    "scripted_agent",
    "scripted_agent_names",
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


def scripted_agent(name: str) -> Callable[[], Model] | None:
    """The factory of scripted agent ``name``: a generic one, else one an installed suite brings."""
    if name in SCRIPTED_AGENTS:
        return SCRIPTED_AGENTS[name]
    for suite in load_all_suites().values():
        if name in suite.agents:
            return suite.agents[name]
    return None


def scripted_agent_names() -> list[str]:
    """Every scripted agent name: the generic ones and those of every installed suite."""
    names = set(SCRIPTED_AGENTS)
    for suite in load_all_suites().values():
        names.update(suite.agents)
    return sorted(names)


def _available() -> str:
    return ", ".join(
        [f"scripted:{n}" for n in scripted_agent_names()] + [f"{p}:MODEL" for p in HOSTED_PROVIDERS]
    )


def provider_of(spec: str) -> str:
    """The provider part of a model spec (``anthropic`` for ``anthropic:claude-x``)."""
    return spec.partition(":")[0]


def validate_model_spec(spec: str, *, base_url: str | None = None) -> None:
    """Check a spec without creating anything: a known provider, a model name, a key where needed.

    ``text:INNER`` is model ``INNER`` driven through the paper's text protocol.
    """
    if not spec.isprintable() or spec != spec.strip():
        # A spec names a model in tables, ids and stderr: control characters (an escape sequence, a
        # newline) or edge spaces are a mistake, and would reach the terminal raw.
        raise UnknownModelError(f"model spec {spec!r} has control characters or edge spaces")
    provider, sep, name = spec.partition(":")
    if provider == "text":
        validate_model_spec(name, base_url=base_url)
        return
    if provider == "scripted" and scripted_agent(name) is not None:
        return
    if provider == "scripted":
        raise UnknownModelError(f"unknown scripted agent {name!r} in {spec!r}; available: {_available()}")
    if provider not in HOSTED_PROVIDERS or not sep or not name:
        raise UnknownModelError(f"unknown model spec {spec!r}; available: {_available()}")
    api_key(provider, base_url)  # raises MissingAPIKeyError naming the variable


def create_model(spec: str, **options: Any) -> Model:
    """Instantiate the model named by ``spec``; ``options`` are `ProviderOptions` fields.

    Scripted agents ignore the options. Hosted models take their key from the environment only.
    """
    validate_model_spec(spec, base_url=options.get("base_url"))
    provider, _, name = spec.partition(":")
    if provider == "text":
        from mcp_resili.client.text_protocol import TextProtocolModel

        return TextProtocolModel(create_model(name, **options))
    if provider == "scripted":
        factory = scripted_agent(name)
        assert factory is not None  # validated above
        return factory()
    settings = ProviderOptions(**options)
    if provider == "anthropic":
        from mcp_resili.client.providers.anthropic import AnthropicModel

        return AnthropicModel(name, settings)
    from mcp_resili.client.providers.openai import OpenAIModel

    return OpenAIModel(name, settings)
