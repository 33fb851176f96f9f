"""Deterministic random streams: one per (seed, episode, tool, call ordinal)."""

from __future__ import annotations

import hashlib
import random


def derive_rng(seed: int, episode: str, tool: str, ordinal: int) -> random.Random:
    """Return an RNG that depends only on its four coordinates.

    Hashing the coordinates (rather than drawing from a shared generator) makes every fault
    draw independent of scheduling: the third call of ``tool`` in ``episode`` sees the same
    numbers whatever ran before it, at any concurrency, for every model.
    """
    if ordinal < 0:
        raise ValueError(f"call ordinal must be >= 0, got {ordinal}")
    key = f"{seed}\x1f{episode}\x1f{tool}\x1f{ordinal}".encode()
    digest = hashlib.blake2b(key, digest_size=16).digest()
    return random.Random(int.from_bytes(digest, "big"))
