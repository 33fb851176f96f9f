"""Suites: the `Suite` contract every benchmark fills in, and the entry-point registry that finds them."""
