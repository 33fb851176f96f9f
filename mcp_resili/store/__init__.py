"""Result stores (read by reports, written only by the runner)."""

from mcp_resili.store.sqlite import DEFAULT_DB, EpisodeRow, RunRow, Store

__all__ = ["DEFAULT_DB", "EpisodeRow", "RunRow", "Store"]
