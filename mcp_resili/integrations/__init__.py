"""Bridges to other evaluation frameworks (floor 9: they may use the client and everything below it).

Nothing in the framework imports an integration; each is an optional extra that its framework loads
through its own plugin mechanism (``inspect`` is loaded by inspect_ai's ``inspect_ai`` entry point).
"""
