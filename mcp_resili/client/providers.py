"""Model specs → model instances. SDK-backed providers are imported only when used."""

from __future__ import annotations

from mcp_resili.client.model import Model
from mcp_resili.client.scripted import SCRIPTED_AGENTS
from mcp_resili.errors import UserError


class UnknownModelError(UserError):
    """A model spec no provider understands."""


def create_model(spec: str) -> Model:
    """Instantiate the model named by ``spec`` (``scripted:oracle``, ``scripted:naive``)."""
    provider, _, name = spec.partition(":")
    if provider == "scripted":
        factory = SCRIPTED_AGENTS.get(name)
        if factory is None:
            raise UnknownModelError(
                f"unknown scripted agent {name!r}; available: "
                + ", ".join(f"scripted:{n}" for n in sorted(SCRIPTED_AGENTS))
            )
        return factory()
    raise UnknownModelError(
        f"unknown model spec {spec!r}; available: "
        + ", ".join(f"scripted:{n}" for n in sorted(SCRIPTED_AGENTS))
    )
