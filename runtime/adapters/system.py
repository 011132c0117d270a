"""Production implementations of the Clock, Entropy and EffectSink seams."""

from __future__ import annotations

import random
import time
import uuid
from datetime import UTC, datetime


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class SystemEntropy:
    def __init__(self) -> None:
        self._random = random.Random()

    def new_id(self) -> uuid.UUID:
        return uuid.uuid4()

    def random(self) -> float:
        return self._random.random()
