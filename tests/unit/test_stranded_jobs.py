"""A hop job dequeued but never claimed (issue 15, M11 item 3: no wait for SAQ's sweep).

A worker stamps each job it dequeues with its boot (JobInfo.boot_id). When
that boot dies between the dequeue and the claim, its Run waits QUEUED
behind an active job nobody will ever finish: SAQ's heartbeat sweep would
end it after minutes. Delivery recovery (startup and the relay) instead
retires it at once and rotates the Run to a fresh sequence, published under
its own key (a finished key is never published again). A live peer's
freshly dequeued job is left alone, never aborted: that peer claims it.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from runtime.cancel import Canceller
from runtime.keys import hop_key
from runtime.models import DeliveryState, RunStatus
from runtime.recovery.boot_lease import BootLeaseKeeper
from runtime.recovery.deliveries import STRANDED, DeliveryRecovery, DeliveryVerdict
from runtime.recovery.reconcile import reconcile_runs
from runtime.recovery.relay import Relays
from runtime.seams import JobStatus
from tests.unit.fakes import World
from tests.unit.waitkit import admit, hop, reboot, run_of, tables, wait_world

pytestmark = pytest.mark.anyio

LEASE_S = 10.0


async def steady(w2: World, keeper: BootLeaseKeeper, *, peer_renews: bool) -> None:
    """Two half-lease ticks: boot-2 renews each time (and is steady after them);
    boot-1 too when `peer_renews`, else its lease lapses."""
    for _ in range(2):
        w2.clock.advance(LEASE_S / 2 + 0.5)
        assert await keeper.renew_once() is True
        if peer_renews:
            assert await w2.ledger.renew_boot("boot-1", LEASE_S, w2.clock.now()) is True
    assert keeper.steady()


async def dequeued_by(w: World, boot_id: str) -> UUID:
    """An echo Run whose job a worker of `boot_id` took and never claimed."""
    run_id = await admit(w, "echo")
    job = await w.broker.inner.dequeue("runs", boot_id)
    assert job is not None and job.run_id == run_id and job.boot_id == boot_id
    return run_id


async def test_startup_retires_a_dead_boots_stranded_job_and_delivers_afresh() -> None:
    w = wait_world()
    run_id = await dequeued_by(w, "boot-1")
    w2 = reboot(w)  # boot-1 never registered a lease: dead (one process per ledger)

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert report.deliveries == {DeliveryVerdict.ROTATED: [run_id]}
    old = await w2.broker.probe(hop_key(run_id, 0))
    assert old is not None and (old.status, old.error) == (JobStatus.ABORTED, STRANDED)
    fresh = await w2.broker.probe(hop_key(run_id, 1))
    assert fresh is not None and fresh.status is JobStatus.QUEUED  # no sweep waited for
    run = run_of(w2, run_id)
    assert (run.status, run.seq) == (RunStatus.QUEUED, 1)
    assert (await hop(w2, run_id)) is not None
    assert run_of(w2, run_id).status is RunStatus.DONE


async def test_a_live_peers_dequeued_job_is_left_alone_by_startup_and_relay() -> None:
    w = wait_world()
    await BootLeaseKeeper(w.deps, LEASE_S).register()  # boot-1 is another live Vessel
    run_id = await dequeued_by(w, "boot-1")
    w2 = reboot(w)
    keeper = BootLeaseKeeper(w2.deps, LEASE_S)
    await keeper.register()

    report = await reconcile_runs(w2.engine, w2.clock.now(), may_fence_others=False)
    assert report.deliveries == {DeliveryVerdict.LIVE_ELSEWHERE: [run_id]}
    await steady(w2, keeper, peer_renews=True)
    await Relays(w2.engine, w2.clock.now(), Canceller(w2.deps), lease=keeper).pass_once()

    job = await w2.broker.probe(hop_key(run_id, 0))
    assert job is not None and job.status is JobStatus.ACTIVE  # never aborted
    assert run_of(w2, run_id).seq == 0
    delivery = tables(w2).delivery_table[(run_id, 0)]
    assert delivery.state is DeliveryState.PUBLISHED


async def test_the_relay_redelivers_once_the_peers_lease_lapsed() -> None:
    w = wait_world()
    await BootLeaseKeeper(w.deps, LEASE_S).register()
    run_id = await dequeued_by(w, "boot-1")
    w2 = reboot(w)
    keeper = BootLeaseKeeper(w2.deps, LEASE_S)
    await keeper.register()
    relays = Relays(w2.engine, w2.clock.now(), Canceller(w2.deps), lease=keeper)
    await relays.pass_once()  # not steady yet: nobody is judged dead
    assert run_of(w2, run_id).seq == 0

    await steady(w2, keeper, peer_renews=False)  # boot-1 stopped renewing
    await relays.pass_once()

    assert run_of(w2, run_id).seq == 1
    old = await w2.broker.probe(hop_key(run_id, 0))
    assert old is not None and old.status is JobStatus.ABORTED


async def test_this_boots_own_dequeued_job_is_retained() -> None:
    w = wait_world()
    run_id = await dequeued_by(w, "boot-1")
    recovery = DeliveryRecovery(w.engine, w.clock.now())
    assert await recovery.recover(run_of(w, run_id)) is DeliveryVerdict.RETAINED
    job = await w.broker.probe(hop_key(run_id, 0))
    assert job is not None and job.status is JobStatus.ACTIVE
