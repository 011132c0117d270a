"""Separate seeded PRNG streams, so changing one kind of randomness (say a
fault probability) never shifts another (the workload)."""

from __future__ import annotations

import hashlib
import random
import uuid
from dataclasses import dataclass

STREAMS = ("workload", "faults", "scheduler", "actors", "ids", "restarts", "swarm")


def stream(seed: int, name: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass
class Streams:
    workload: random.Random
    faults: random.Random
    scheduler: random.Random
    actors: random.Random
    ids: random.Random
    restarts: random.Random
    swarm: random.Random
    """The swarm profile's draws for kinds added later (sim.faults.options.swarm)."""

    @classmethod
    def from_seed(cls, seed: int) -> Streams:
        return cls(*(stream(seed, name) for name in STREAMS))


class SeededEntropy:
    """runtime's Entropy seam on a seeded stream."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def new_id(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def random(self) -> float:
        return self._rng.random()
