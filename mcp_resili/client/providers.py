"""Model specs → model instances. SDK-backed providers are imported only when used."""

from __future__ import annotations

from mcp_resili.client.model import Model
from mcp_resili.client.scripted import SCRIPTED_AGENTS
from mcp_resili.errors import UserError

#: The models a run plays when none are named.
DEFAULT_MODELS = ("scripted:oracle", "scripted:naive")


class UnknownModelError(UserError):
    """A model spec no provider understands."""


def create_model(spec: str) -> Model:
    """Instantiate the model named by ``spec`` (``scripted:oracle``, ``text:scripted:text-oracle``, ...).

    ``text:INNER`` runs model ``INNER`` through the paper's text protocol (`TextProtocolModel`).
    """
    provider, _, name = spec.partition(":")
    if provider == "text":
        from mcp_resili.client.text_protocol import TextProtocolModel

        return TextProtocolModel(create_model(name))
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
