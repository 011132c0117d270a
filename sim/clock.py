"""Virtual time for simulations.

`VirtualClock` implements runtime's Clock seam on the event loop's clock
(trio's MockClock under the simulator): wall time is a fixed epoch plus
virtual seconds, and it never goes backwards. `FrozenTimeInstrument` is a
trio Instrument that keeps freezegun's frozen time equal to it, so that
third-party code calling `datetime.now()` or `time.time()` sees virtual time
too (NOTES-dependencies.md, freezegun).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import trio.abc

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class ClockWentBackwards(AssertionError):
    pass


class VirtualClock:
    def __init__(self, epoch: datetime = EPOCH) -> None:
        self.epoch = epoch
        self._last = 0.0

    def monotonic(self) -> float:
        now = anyio.current_time()
        if now < self._last:
            raise ClockWentBackwards(f"virtual time moved from {self._last} to {now}")
        self._last = now
        return now

    def now(self) -> datetime:
        return self.epoch + timedelta(seconds=self.monotonic())


class FrozenTimeInstrument(trio.abc.Instrument):
    """Moves freezegun's frozen time with virtual time before each task step."""

    def __init__(self, frozen: Any, epoch: datetime = EPOCH) -> None:
        self.frozen = frozen
        self.epoch = epoch
        self._at = -1.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        now = trio.current_time()
        if now != self._at:
            self._at = now
            self.frozen.move_to(self.epoch + timedelta(seconds=now))
