"""Run a sweep on Ray: ``mcp-resili run --executor ray [--ray-address ADDR]``.

Install with ``pip install 'mcp-resili[ray]'``.
Ray is imported only when a run uses it. See docs/scaling.md.
"""

from mcp_resili.integrations.ray.executor import (
    RAY_EXTRA,
    RayExecutor,
    RayRunError,
    RayUnavailableError,
    import_ray,
)

__all__ = ["RAY_EXTRA", "RayExecutor", "RayRunError", "RayUnavailableError", "import_ray"]
