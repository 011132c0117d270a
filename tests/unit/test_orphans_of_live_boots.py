"""Orphans are only the work of dead boots (issue 15, M11: several Vessels on
one database; runtime.recovery.orphans and runtime.recovery.boot_lease).

A hop claimed by another boot whose lease is live is left RUNNING by startup
and by the relay; once that lease expires (by the ledger's clock) the same
relay fences and fails it as lost, exactly as a single Vessel always did.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from runtime import faults
from runtime.cancel import Canceller
from runtime.events.hop import HopEvents
from runtime.models import RunStatus
from runtime.recovery.boot_lease import BootLeaseKeeper
from runtime.recovery.orphans import LOST, OrphanVerdict, recover_orphan
from runtime.recovery.reconcile import reconcile_runs
from runtime.recovery.relay import Relays
from tests.unit.fakes import World, settle_alone
from tests.unit.waitkit import Crash, admit, crash_hop, reboot, run_of, tables, wait_world

pytestmark = pytest.mark.anyio

LEASE_S = 10.0


async def stranded(w: World) -> UUID:
    """A Run RUNNING under boot-1's claim (its hop stopped at the claim)."""
    w.faults.raise_at(faults.CLAIM_COMMITTED, Crash())
    run_id = await admit(w, "consent_gate")
    assert await w.broker.inner.dequeue("runs") is not None
    await crash_hop(w, run_id)
    assert run_of(w, run_id).status is RunStatus.RUNNING
    return run_id


async def test_startup_leaves_a_live_other_boots_hop_alone() -> None:
    w = wait_world()
    await BootLeaseKeeper(w.deps, LEASE_S).register()
    run_id = await stranded(w)
    w2 = reboot(w)  # one second later: boot-1's lease is still live

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert report.orphans == {OrphanVerdict.LIVE_ELSEWHERE: [run_id]}
    assert run_of(w2, run_id).status is RunStatus.RUNNING
    assert not report.degraded


async def test_the_relay_recovers_the_hop_once_that_lease_expires() -> None:
    w = wait_world()
    await BootLeaseKeeper(w.deps, LEASE_S).register()
    run_id = await stranded(w)
    w2 = reboot(w)
    relays = Relays(w2.engine, w2.clock.now(), Canceller(w2.deps))
    await relays.pass_once()
    assert run_of(w2, run_id).status is RunStatus.RUNNING

    w2.clock.advance(LEASE_S)  # boot-1 never renewed: dead now
    await relays.pass_once()

    run = run_of(w2, run_id)
    assert (run.status, run.error) == (RunStatus.FAILED, LOST)


async def test_a_renewed_lease_keeps_the_hop_alive() -> None:
    w = wait_world()
    keeper = BootLeaseKeeper(w.deps, LEASE_S)
    await keeper.register()
    run_id = await stranded(w)
    w2 = reboot(w)
    w2.clock.advance(LEASE_S - 2)
    assert await keeper.renew_once() is True  # boot-1 is alive and renewing

    w2.clock.advance(LEASE_S - 2)
    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert report.orphans == {OrphanVerdict.LIVE_ELSEWHERE: [run_id]}
    assert run_of(w2, run_id).status is RunStatus.RUNNING


async def test_an_unregistered_earlier_boot_is_dead_as_before() -> None:
    w = wait_world()
    run_id = await stranded(w)
    w2 = reboot(w)

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert report.failed_orphans == [run_id]


async def test_a_boot_judges_others_only_once_its_own_lease_is_steady() -> None:
    w = wait_world()
    await BootLeaseKeeper(w.deps, LEASE_S).register()
    run_id = await stranded(w)
    w2 = reboot(w)
    own = BootLeaseKeeper(w2.deps, LEASE_S)
    await own.register()
    relays = Relays(w2.engine, w2.clock.now(), Canceller(w2.deps), lease=own)
    w2.clock.advance(LEASE_S - 1)  # boot-1's lease expired, but boot-2's is not yet steady
    assert await own.renew_once() is True and not own.steady()
    await relays.pass_once()
    assert run_of(w2, run_id).status is RunStatus.RUNNING

    w2.clock.advance(1)
    assert own.steady()
    await relays.pass_once()
    assert (run_of(w2, run_id).status, run_of(w2, run_id).error) == (RunStatus.FAILED, LOST)


async def test_a_lapsed_renewal_restarts_the_steady_period() -> None:
    w = wait_world()
    own = BootLeaseKeeper(w.deps, LEASE_S)
    await own.register()
    w.clock.advance(LEASE_S + 1)  # the lease ran out unrenewed (the database was away)
    assert await own.renew_once() is False
    assert (own.lapses, own.steady()) == (1, False)
    w.clock.advance(LEASE_S - 1)
    assert await own.renew_once() is True and not own.steady()
    w.clock.advance(1)
    assert await own.renew_once() is True and own.steady()


async def test_a_boot_whose_renewal_is_still_retrying_judges_nobody() -> None:
    """A renewal stuck retrying through a database outage keeps `steady_since`
    unchanged; once the last successful renewal is a whole lease old the boot's
    own lease may have lapsed with everyone's, so it judges nobody (found by the
    simulator's two_vessels scenario: a peer's live hop was failed as lost)."""
    w = wait_world()
    own = BootLeaseKeeper(w.deps, LEASE_S)
    await own.register()
    w.clock.advance(LEASE_S - 1)
    assert await own.renew_once() is True
    w.clock.advance(1)
    assert own.steady()
    w.clock.advance(LEASE_S - 2)  # no renewal has returned since: still within the lease
    assert own.steady()
    w.clock.advance(1)  # the last renewal is a whole lease old: the lease may be gone
    assert not own.steady()
    assert await own.renew_once() is False and not own.steady()  # it had lapsed: start over


async def test_with_a_lease_the_relay_pays_a_dead_boots_recorded_evidence_debt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Boot-1 settled a Run and died before its terminal Step; no restart follows (a
    peer already serves, as a zombie's successor does). The peer's relay writes the
    Step once the Run has been terminal for a lease, not before (found by the
    simulator's zombies scenario: a DONE Run without its terminal Step after heal).
    The hop settles alone, as one whose Step writer is not idle does: an idle one
    writes the Step with truth (issue 17) and leaves no such window."""
    monkeypatch.setattr(HopEvents, "fold_terminal", settle_alone)
    w = wait_world()
    w.faults.raise_at(faults.SETTLE_TERMINAL_COMMITTED, Crash())
    run_id = await admit(w, "echo")
    assert await w.broker.inner.dequeue("runs") is not None
    await crash_hop(w, run_id)
    assert run_of(w, run_id).status is RunStatus.DONE
    w2 = reboot(w)
    own = BootLeaseKeeper(w2.deps, LEASE_S)
    await own.register()
    relays = Relays(w2.engine, w2.clock.now(), Canceller(w2.deps), lease=own)
    await relays.pass_once()  # terminal for one second: its own hop may still write it
    assert [s.kind for s in tables(w2).step_log.get(run_id, [])
            if s.kind.startswith("run.done")] == []
    w2.clock.advance(LEASE_S)
    await relays.pass_once()
    assert [s.kind for s in tables(w2).step_log[run_id]].count("run.done") == 1



async def test_steadiness_is_asked_again_once_the_peers_lease_is_read() -> None:
    """A visit that began steady and then waited out an outage (its own lease lapsing
    meanwhile) must not fence by the lease it reads afterwards (found by two_vessels:
    a relay failed a live peer's hop as lost after such a wait)."""
    w = wait_world()
    await BootLeaseKeeper(w.deps, LEASE_S).register()
    run_id = await stranded(w)
    w2 = reboot(w)
    w2.clock.advance(LEASE_S)  # boot-1's lease expired
    answers = iter([True, False])  # steady as the visit began, no longer after the read
    verdict = await recover_orphan(w2.engine, Canceller(w2.deps), run_of(w2, run_id),
                                   may_fence_others=lambda: next(answers))
    assert verdict is OrphanVerdict.LIVE_ELSEWHERE
    assert run_of(w2, run_id).status is RunStatus.RUNNING
