"""Result stores (read by reports and exports, written only by the runner)."""

from mcp_resili.store.sqlite import (
    DEFAULT_DB,
    EpisodeRow,
    RunRow,
    Store,
    StoredKey,
    StoredRows,
    StoreError,
    fault_specs,
    may_have_score_component,
)

__all__ = [
    "DEFAULT_DB",
    "EpisodeRow",
    "RunRow",
    "Store",
    "StoreError",
    "StoredKey",
    "StoredRows",
    "fault_specs",
    "may_have_score_component",
]
