"""A boot's lease keeper through a renewal that retries through an outage (issue 15, M11).

The retrying ledger (runtime.retry) may hold one renewal for many seconds; the
memory ledger then measures the lease from the first attempt's `now`. The keeper
must neither judge peers while such a renewal is in flight, nor go on judging
right after it returned (peers whose renewals fell due earlier in the outage may
have lapsed), nor call its own lease continuous when the renewal returned after
the previous lease could have run out (simulator two_vessels, swarm seeds 2, 69,
84, 121, 123, 130, 150).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import anyio
import pytest

from runtime.recovery.boot_lease import BootLeaseKeeper
from tests.unit.fakes import World, make_world

pytestmark = pytest.mark.anyio

LEASE_S = 15.0


class SlowRenewals:
    """A ledger whose renewals take `delay_s` of the fake clock (retries through an
    outage), or wait on `gate` while it is set; everything else is the inner one."""

    def __init__(self, w: World) -> None:
        self.inner, self.clock = w.ledger, w.clock
        self.delay_s = 0.0
        self.gate: anyio.Event | None = None

    async def renew_boot(self, boot_id: str, lease_s: float, now: datetime) -> bool:
        if self.gate is not None:
            await self.gate.wait()
        self.clock.advance(self.delay_s)
        return bool(await self.inner.renew_boot(boot_id, lease_s, now))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def steady_keeper() -> tuple[World, SlowRenewals, BootLeaseKeeper]:
    w = make_world()
    ledger = SlowRenewals(w)
    keeper = BootLeaseKeeper(replace(w.deps, ledger=ledger), LEASE_S)
    await keeper.register()
    for _ in range(4):
        w.clock.advance(keeper.renew_every_s)
        assert await keeper.renew_once() is True
    assert keeper.steady()
    return w, ledger, keeper


async def test_a_renewal_returning_after_the_lease_could_have_run_out_is_a_lapse() -> None:
    w, ledger, keeper = await steady_keeper()
    w.clock.advance(keeper.renew_every_s)
    ledger.delay_s = LEASE_S  # committed (the memory ledger says live) only after expiry
    assert await keeper.renew_once() is False
    assert keeper.lapses == 1 and not keeper.steady()


async def test_a_slow_renewal_restarts_steadiness_from_its_return() -> None:
    w, ledger, keeper = await steady_keeper()
    w.clock.advance(keeper.renew_every_s)
    ledger.delay_s = 4.0  # an outage that may have lapsed peers renewing before this boot
    assert await keeper.renew_once() is True
    assert not keeper.steady()
    ledger.delay_s = 0.0
    for _ in range(2):
        w.clock.advance(keeper.renew_every_s)
        assert await keeper.renew_once() is True
        assert not keeper.steady()  # less than a whole lease since the slow one returned
    w.clock.advance(keeper.renew_every_s)
    assert await keeper.renew_once() is True
    assert keeper.steady()


async def test_no_judging_while_a_renewal_is_in_flight_for_long() -> None:
    w, ledger, keeper = await steady_keeper()
    ledger.gate = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(keeper.renew_once)
        while keeper.renewing_since is None:
            await anyio.sleep(0)
        assert keeper.steady()  # just begun: a renewal takes milliseconds
        w.clock.advance(keeper.slow_s)
        assert not keeper.steady()  # retrying through an outage: judge nobody
        ledger.gate.set()
    assert not keeper.steady()
