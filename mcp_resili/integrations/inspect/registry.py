"""inspect_ai's entry point (``[project.entry-points.inspect_ai] mcp_resili``): our tasks and models.

inspect imports this module on every run, for every user, so it imports inspect_ai and the two
modules below only; mcp_resili's own modules load when a task or model is built.
"""

from mcp_resili.integrations.inspect import models, tasks

__all__ = ["models", "tasks"]
