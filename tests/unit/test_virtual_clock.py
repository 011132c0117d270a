"""sim.clock.VirtualClock: `now()` is epoch + virtual seconds at every call, whether it
sums afresh or hands back the instant's datetime again, and never goes backwards."""

from __future__ import annotations

from datetime import timedelta

import pytest
import trio

from sim.clock import ClockWentBackwards, VirtualClock, sim_clock


def test_now_is_the_epoch_plus_virtual_time_across_jumps_and_epoch_changes() -> None:
    async def main() -> None:
        clock = VirtualClock()
        for step in range(30):
            first = clock.now()
            assert first == clock.now() == clock.epoch + timedelta(seconds=trio.current_time())
            if step == 10:
                clock.epoch = clock.epoch + timedelta(days=1)  # a new epoch is read at once
                assert clock.now() == clock.epoch + timedelta(seconds=trio.current_time())
            await trio.sleep(0.123457 * (step % 3))
            assert clock.now() == clock.epoch + timedelta(seconds=trio.current_time())

    trio.run(main, clock=sim_clock())


def test_a_clock_that_went_backwards_still_raises() -> None:
    async def main() -> None:
        clock = VirtualClock()
        await trio.sleep(5)
        clock.now()
        clock._last = 10.0
        with pytest.raises(ClockWentBackwards):
            clock.now()

    trio.run(main, clock=sim_clock())
