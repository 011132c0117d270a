"""Virtual time for simulations.

`VirtualClock` implements runtime's Clock seam on the event loop's clock
(trio's MockClock under the simulator): wall time is a fixed epoch plus
virtual seconds, and it never goes backwards. `FrozenTimeInstrument` is a
trio Instrument that keeps freezegun's frozen time equal to it, so that
third-party code calling `datetime.now()` or `time.time()` sees virtual time
too (NOTES-dependencies.md, freezegun). `sim_clock()` is trio's MockClock
at rate 0, which never reads the real clock: under freezegun the real clock is
freezegun's fake, which inspects the caller's stack on every call.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import trio
import trio.abc
import trio.testing

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class ClockWentBackwards(AssertionError):
    pass


class VirtualClock:
    def __init__(self, epoch: datetime = EPOCH) -> None:
        self.epoch = epoch
        self._last = 0.0
        self._at: tuple[datetime, float, datetime] | None = None
        """(epoch, virtual seconds, their datetime) of the last `now()`."""

    def monotonic(self) -> float:
        now = trio.current_time()
        if now < self._last:
            raise ClockWentBackwards(f"virtual time moved from {self._last} to {now}")
        self._last = now
        return now

    def now(self) -> datetime:
        """epoch + virtual seconds. Virtual time only moves while every task waits, so
        most calls fall in the same instant as the one before: that datetime (an
        immutable value, equal to a fresh sum) is returned again instead of summed."""
        seconds = self.monotonic()
        at = self._at
        if at is not None and at[1] == seconds and at[0] is self.epoch:
            return at[2]
        value = self.epoch + timedelta(seconds=seconds)
        self._at = (self.epoch, seconds, value)
        return value


def _no_real_time() -> float:
    return 0.0


def sim_clock() -> trio.testing.MockClock:
    """MockClock(rate=0, autojump_threshold=0) that never reads the real clock.

    At rate 0 MockClock's time is `virtual_base + 0 * (real - real_base)`,
    which is `virtual_base` to the bit whatever `real` is; so a constant real
    clock gives the very same times, without freezegun's fake perf_counter.
    The run loop asks the clock on every turn, so this one (MockClock cannot be
    subclassed) answers without the general machinery: `current_time` returns
    the virtual base itself, and the autojump reads the next deadline from the
    run loop instead of building trio's whole statistics record, which also
    polls the I/O backend for figures nobody reads. Same times, same jumps.
    """
    clock = trio.testing.MockClock(rate=0.0, autojump_threshold=0.0)
    clock._real_clock = _no_real_time  # trio is pinned; MockClock keeps it for its tests
    general = clock.current_time

    def current_time() -> float:
        return general() if clock.rate else clock._virtual_base

    def autojump() -> None:
        runner = trio._core._run.GLOBAL_RUN_CONTEXT.runner
        jump = runner.deadlines.next_deadline() - current_time()
        if 0 < jump < math.inf:
            clock.jump(jump)

    clock.current_time = current_time  # type: ignore[method-assign]
    clock._autojump = autojump  # type: ignore[method-assign]
    return clock


class VirtualTimeFactory:
    """freezegun's time factory, reading virtual time when asked.

    `virtual_time(frozen, clock)` puts it in place of the factory freeze_time
    started, so third-party `datetime.now()` sees epoch + the clock's time.
    It gives what FrozenTimeInstrument gave (virtual time only moves between
    task steps, while every task is blocked) without a call on every task
    step. freezegun keeps naive UTC datetimes.
    """

    def __init__(self, clock: trio.testing.MockClock, epoch: datetime = EPOCH) -> None:
        self.clock = clock
        self.epoch = epoch.astimezone(UTC).replace(tzinfo=None)

    def __call__(self) -> datetime:
        return self.epoch + timedelta(seconds=self.clock.current_time())


def virtual_time(frozen: Any, clock: trio.testing.MockClock) -> VirtualTimeFactory:
    """Replace the factory `frozen` (freeze_time's, the innermost) by virtual time."""
    from freezegun import api

    if not api.freeze_factories or api.freeze_factories[-1] is not frozen:
        raise RuntimeError("virtual_time() needs the innermost freeze_time's factory")
    factory = VirtualTimeFactory(clock)
    api.freeze_factories[-1] = factory  # type: ignore[call-overload]
    return factory


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


_PROCESS_FREEZE: list[Any] = []


def freeze_process() -> None:
    """Keep freezegun started for the rest of this process (idempotent).

    Starting freezegun scans every loaded module for time functions to patch,
    which cost a sixth of a short simulation. With an outer freeze left
    running, the `freeze_time` each simulation opens is nested: freezegun then
    only pushes a factory, which `virtual_time` replaces as before, so a
    simulation sees the same fakes and the same virtual time (the determinism
    audit compares these processes' hashes with fresh, unfrozen ones). Only
    for processes that do nothing but simulate (campaign workers, the speed
    benchmark): everything else in them reads a frozen clock; real wall time
    is `real_perf_counter()`.
    """
    if not _PROCESS_FREEZE:
        from freezegun import freeze_time

        frozen = freeze_time(EPOCH)
        frozen.start()
        _PROCESS_FREEZE.append(frozen)


@contextmanager
def held_freeze() -> Iterator[None]:
    """Keep freezegun started while a run of in-process simulations lasts.

    What `freeze_process` gives a worker, for the length of a `with` block in a
    process that does other things too (`--jobs 1` campaigns, the rules sweep):
    each simulation's own `freeze_time` nests inside this one, so it pushes a
    factory instead of scanning every loaded module (about 5% of a `--jobs 1`
    swarm campaign, py-spy); the simulations see the same fakes and the same
    virtual time. Inside the block, code between simulations reads a frozen
    clock through `time` and `datetime`: harness code there reads real time via
    `real_perf_counter()` / `real_monotonic()`. A no-op when freezegun is already
    started (a worker, a test's own freeze).
    """
    from freezegun import api, freeze_time

    if api.freeze_factories:
        yield
        return
    frozen = freeze_time(EPOCH)
    frozen.start()
    try:
        yield
    finally:
        frozen.stop()


def real_monotonic() -> float:
    """time.monotonic, even under freezegun (as `real_perf_counter`)."""
    from freezegun import api

    return float(api.real_monotonic())


def real_perf_counter() -> float:
    """time.perf_counter, even under freezegun (looked up in freezegun's module at
    call time, which its patching skips)."""
    from freezegun import api

    return float(api.real_perf_counter())
