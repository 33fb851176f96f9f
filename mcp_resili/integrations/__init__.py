"""Bridges to other tools' ecosystems (floor 9: they may use the client and everything below it).

Nothing in the framework imports an integration; each is an optional extra that imports its tool only
when used: ``ray`` by ``run --executor ray``, ``inspect`` through inspect_ai's ``inspect_ai`` entry point.
"""
