"""Deterministic random streams: one per (seed, episode, tool, call ordinal)."""

from __future__ import annotations

import _random
import hashlib
import random

# `random.Random(n)` seeds through Python-level `__init__` and `seed` wrappers that, for an int, only
# hand ``n`` to the C seeding and clear the gauss cache; calling those two directly builds the very
# same generator (same state, same draws) for a fraction less of a call's fault decision.
_new_random = random.Random.__new__
_seed_c = _random.Random.seed


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
    rng = _new_random(random.Random)
    _seed_c(rng, int.from_bytes(digest, "big"))  # what random.Random(n) does for an int n
    rng.gauss_next = None  # type: ignore[attr-defined]  # set by Random.seed; not in the stubs
    return rng
