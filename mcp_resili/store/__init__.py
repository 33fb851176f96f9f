"""Result stores (read by reports and exports, written only by the runner)."""

from mcp_resili.store.sqlite import DEFAULT_DB, EpisodeRow, RunRow, Store, StoredKey, StoredRows, StoreError

__all__ = ["DEFAULT_DB", "EpisodeRow", "RunRow", "Store", "StoreError", "StoredKey", "StoredRows"]
