"""Startup reconciliation against seed 000_81a5c720b14d934a.txt.

"Events, settlement, and waits": cleanup failure cannot conceal terminal
truth; "Cancellation, mutation, and recovery": startup retries idempotent
checkpoint deletion as best effort, and the relay keeps retrying it; an
active broker row without a trustworthy start timestamp degrades recovery
(the job is left alone, never fenced as pre-boot); missing or mismatched
delivery truth makes the pass degraded (after re-reading the Run, so a stale
page is no evidence); the strict profile refuses to serve a degraded pass
before any worker or relay starts, and the relay keeps revisiting the Run.
"""

from __future__ import annotations

import math
from uuid import UUID

import pytest

from runtime.app.lifespan import Lifespan, StartupRefused
from runtime.app.profiles import build_vessel
from runtime.cancel import Canceller
from runtime.errors import LedgerUnavailable
from runtime.keys import hop_key
from runtime.models import DeliveryState, RunStatus
from runtime.recovery.deliveries import DeliveryVerdict
from runtime.recovery.reconcile import ReconcileReport, reconcile_runs
from runtime.recovery.relay import Relays
from runtime.seams import JobStatus
from runtime.stasis.consent import decide
from runtime.worker import HopOutcome
from tests.unit.fakes import World
from tests.unit.waitkit import admit, hop, reboot, run_of, tables, wait_world

pytestmark = pytest.mark.anyio


def stick_checkpoints(w: World) -> list[UUID]:
    """Every checkpoint deletion fails from now on (a held lock, a storage fault)."""
    attempts: list[UUID] = []

    async def refuse(run_id: UUID) -> bool:
        attempts.append(run_id)
        raise LedgerUnavailable("checkpoint row locked")

    tables(w).delete_checkpoint = refuse  # type: ignore[method-assign]
    return attempts


async def done_with_checkpoint(w: World) -> UUID:
    """A consent_gate Run settled DONE whose checkpoint deletion failed."""
    run_id = await admit(w, "consent_gate")
    assert await hop(w, run_id) is HopOutcome.PARKED
    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None
    await decide(w.engine, consent_id, True, "alice")
    stick_checkpoints(w)
    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert run_of(w, run_id).status is RunStatus.DONE
    assert run_id in tables(w).checkpoint_table
    return run_id


async def test_cleanup_failure_cannot_block_startup_the_checkpoint_is_owed() -> None:
    w = wait_world()
    done = await done_with_checkpoint(w)
    queued = await admit(w, "echo")  # later phases of the pass must still run for it
    w2 = reboot(w)
    attempts = stick_checkpoints(w2)

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert done in attempts  # startup tried the deletion ...
    assert report.cleanup_owed == [done]  # ... owes it, and is not degraded by it
    assert not report.degraded
    assert queued in [rid for ids in report.deliveries.values() for rid in ids]
    assert run_of(w2, done).status is RunStatus.DONE  # terminal truth unchanged


async def test_the_relay_retries_owed_checkpoint_deletion_until_it_lands() -> None:
    w = wait_world()
    done = await done_with_checkpoint(w)
    w2 = reboot(w)
    attempts = stick_checkpoints(w2)
    await reconcile_runs(w2.engine, w2.clock.now())
    relays = Relays(w2.engine, w2.clock.now(), Canceller(w2.engine.deps))

    await relays.pass_once()  # still stuck: retried, owed again, nothing raised
    assert attempts.count(done) == 2
    assert done in tables(w2).checkpoint_table

    del tables(w2).delete_checkpoint  # the storage lets go
    await relays.pass_once()
    assert done not in tables(w2).checkpoint_table
    assert await w2.ledger.checkpoint_debts(10) == []
    assert run_of(w2, done).status is RunStatus.DONE


# -- degraded triggers (seed 000, startup reconciliation) -------------------------------


async def queued_with_active_job(w: World, started_at: float | None) -> tuple[UUID, str]:
    """An echo Run still QUEUED whose broker job a worker of the dead boot took
    (ACTIVE) before its claim committed; the broker row reports `started_at`."""
    run_id = await admit(w, "echo")
    key = hop_key(run_id, 0)
    broker = w.broker.inner
    taken = await broker.dequeue(broker.jobs[key].info.queue)
    assert taken is not None and taken.key == key
    job = broker.jobs[key]
    job.info = job.info.model_copy(update={"started_at": started_at})
    return run_id, key


def verdict_of(report: ReconcileReport, run_id: UUID) -> str:
    return next(v for v, ids in report.deliveries.items() if run_id in ids)


@pytest.mark.parametrize("started_at", [None, 0.0, -3.0, math.nan, math.inf])
async def test_an_active_row_without_a_trustworthy_start_degrades_and_is_never_fenced(
    started_at: float | None,
) -> None:
    w = wait_world()
    run_id, key = await queued_with_active_job(w, started_at)
    w2 = reboot(w)

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert verdict_of(report, run_id) == DeliveryVerdict.UNTRUSTED_START
    assert report.degraded
    assert "active broker jobs without a trustworthy start time" in report.degraded_reasons
    assert w2.broker.aborts == []  # not fenced as if it were pre-boot ...
    assert w.jobs()[key].status is JobStatus.ACTIVE
    run = run_of(w2, run_id)
    assert (run.status, run.seq) == (RunStatus.QUEUED, 0)  # ... nor rotated past
    assert (run_id, 1) not in tables(w2).delivery_table


async def test_an_active_row_proven_pre_boot_is_still_fenced() -> None:
    """The control: a start before the boot cutoff is proof, and it is fenced."""
    w = wait_world()
    run_id, key = await queued_with_active_job(w, w.clock.now().timestamp())
    w2 = reboot(w)

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert verdict_of(report, run_id) == DeliveryVerdict.FENCING
    assert w2.broker.aborts == [key]
    assert not report.degraded


@pytest.mark.parametrize("state", [DeliveryState.CLAIMED, DeliveryState.SETTLED,
                                   DeliveryState.FAILED])
async def test_a_queued_run_whose_delivery_does_not_match_degrades(state: DeliveryState) -> None:
    w = wait_world()
    run_id = await admit(w, "echo")
    table = tables(w).delivery_table
    table[(run_id, 0)] = table[(run_id, 0)].model_copy(update={"state": state})
    w2 = reboot(w)
    published = len(w2.broker.publishes)

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert verdict_of(report, run_id) == DeliveryVerdict.MISMATCHED
    assert report.degraded
    assert "QUEUED Runs whose delivery row does not match" in report.degraded_reasons
    run = run_of(w2, run_id)
    assert (run.status, run.seq) == (RunStatus.QUEUED, 0)
    assert len(w2.broker.publishes) == published and w2.broker.aborts == []


async def test_a_stale_page_is_reread_before_the_delivery_is_called_mismatched() -> None:
    """A worker of another process claims the Run after the page listed it QUEUED:
    the CLAIMED row then matches the Run's truth, and nothing is degraded."""
    w = wait_world()
    run_id = await admit(w, "echo")
    w2 = reboot(w)
    ledger = tables(w2)
    read = ledger.get_delivery

    async def claimed_meanwhile(rid: UUID, seq: int) -> object:
        if rid == run_id:
            await ledger.claim_delivery(rid, seq, "boot-other", "token", w2.clock.now())
        return await read(rid, seq)

    ledger.get_delivery = claimed_meanwhile  # type: ignore[assignment,method-assign]

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert verdict_of(report, run_id) == DeliveryVerdict.SETTLED_ELSEWHERE
    assert not report.degraded


async def test_a_strict_startup_refuses_degraded_delivery_truth_before_serving() -> None:
    w = wait_world()
    await queued_with_active_job(w, None)
    mismatched = await admit(w, "echo")
    table = tables(w).delivery_table
    table[(mismatched, 0)] = table[(mismatched, 0)].model_copy(
        update={"state": DeliveryState.SETTLED})
    w2 = reboot(w)
    vessel = build_vessel(w2.deps, registry=w2.registry)
    served: list[str] = []
    vessel.lanes.serve = lambda: served.append("lanes")  # type: ignore[assignment,method-assign]
    lifespan = Lifespan(vessel, strict=True)

    with pytest.raises(StartupRefused) as refused:
        async with lifespan.serving():
            served.append("body")

    assert lifespan.status.phase == "refused" and served == []  # no worker, no HTTP body
    message = str(refused.value)
    assert "active broker jobs without a trustworthy start time" in message
    assert "QUEUED Runs whose delivery row does not match" in message
    assert "\n" not in message  # one line for `vessel serve`


async def test_the_relay_keeps_revisiting_a_degraded_delivery_until_its_truth_is_proven() -> None:
    w = wait_world()
    run_id, key = await queued_with_active_job(w, None)
    w2 = reboot(w)
    cutoff = w2.clock.now()
    report = await reconcile_runs(w2.engine, cutoff)  # best effort: degraded, logged
    assert report.degraded
    relays = Relays(w2.engine, cutoff, Canceller(w2.engine.deps))

    await relays.pass_once()
    await relays.pass_once()  # still no start time: left alone, page kept for revisiting
    assert w2.broker.aborts == []
    assert relays.pages[RunStatus.QUEUED].revisits

    job = w.broker.inner.jobs[key]  # the broker row gets its start (from the dead boot)
    job.info = job.info.model_copy(update={"started_at": cutoff.timestamp() - 30.0})
    await relays.pass_once()
    assert w2.broker.aborts == [key]  # now proven pre-boot: fenced, then rotated once finished
    assert run_of(w2, run_id).status is RunStatus.QUEUED
