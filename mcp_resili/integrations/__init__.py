"""Bridges to other tools' ecosystems (Ray, ...): each imports its tool only when used."""
