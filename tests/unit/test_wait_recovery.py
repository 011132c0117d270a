"""Startup recovery of durable waits after process death (reconcile_runs).

Seed 000 ("Cancellation, mutation, and recovery") and seed 003 ("Return
makes a new claim"). A fault point raises `Crash` (a BaseException) inside
the hop; `reboot` then builds the next incarnation over the same ledger and
broker, and reconcile_runs runs with that boot's cutoff. Exact pre-park
windows are parked; everything else uncheckpointed fails as lost.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from runtime import faults
from runtime.keys import hop_key
from runtime.models import (
    AgentJobStatus,
    ConsentStatus,
    DeliveryState,
    ResumeMode,
    RunStatus,
)
from runtime.recovery.orphans import LOST, OrphanVerdict
from runtime.recovery.reconcile import ReconcileReport, reconcile_runs
from runtime.seams import JobStatus
from runtime.stasis.consent import decide
from runtime.worker import HopOutcome
from tests.unit.fakes import World
from tests.unit.waitkit import (
    PLAN,
    Crash,
    FakeAgents,
    FakeOrchestrator,
    admit,
    crash_hop,
    hop,
    reboot,
    run_of,
    tables,
    wait_world,
)

pytestmark = pytest.mark.anyio


async def crash_at(w: World, point: str, pattern: str, **content: object) -> UUID:
    """Admit a Run, let the broker hand out its job, and die at `point` in the hop."""
    w.faults.raise_at(point, Crash())
    run_id = await admit(w, pattern, **content)
    assert await w.broker.inner.dequeue("runs") is not None  # the dead boot's active job
    await crash_hop(w, run_id)
    return run_id


async def restart(w: World) -> tuple[World, ReconcileReport]:
    nxt = reboot(w)
    return nxt, await reconcile_runs(nxt.engine, nxt.clock.now())


async def test_crash_after_consent_row_parks_awaiting_consent_with_that_consent() -> None:
    w = wait_world()
    run_id = await crash_at(w, faults.CONSENT_ROW_SAVED, "consent_gate")
    assert run_of(w, run_id).status is RunStatus.RUNNING
    (consent_id,) = tables(w).consent_table

    w2, report = await restart(w)

    assert report.orphans == {OrphanVerdict.PARKED_CONSENT: [run_id]}
    run = run_of(w2, run_id)
    assert (run.status, run.consent_id, run.seq) == (
        RunStatus.AWAITING_CONSENT, consent_id, 0)
    assert tables(w2).delivery_table[(run_id, 0)].state is DeliveryState.SETTLED
    # The dead boot's job was fenced.
    assert w2.broker.inner.jobs[hop_key(run_id, 0)].info.status is JobStatus.ABORTING

    # It behaves as any parked consent from here on.
    await decide(w2.engine, consent_id, True, "alice")
    assert await hop(w2, run_id) is HopOutcome.SETTLED
    assert run_of(w2, run_id).result == {"verdicts": ["APPROVED"]}


async def test_an_already_decided_consent_in_that_window_is_parked_and_refired() -> None:
    w = wait_world()
    run_id = await crash_at(w, faults.CONSENT_ROW_SAVED, "consent_gate")
    (consent_id,) = tables(w).consent_table
    w2 = reboot(w)
    # The verdict lands before startup reconciliation: nothing is parked yet.
    await decide(w2.engine, consent_id, False, "alice")
    assert run_of(w2, run_id).status is RunStatus.RUNNING

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert report.orphans == {OrphanVerdict.PARKED_CONSENT: [run_id]}
    run = run_of(w2, run_id)
    assert (run.status, run.seq, run.consent_id) == (RunStatus.QUEUED, 1, consent_id)
    delivery = tables(w2).delivery_table[(run_id, 1)]
    assert delivery.mode is ResumeMode.RESUME
    assert delivery.state is DeliveryState.PUBLISHED
    assert w2.broker.inner.jobs[hop_key(run_id, 1)].info.status is JobStatus.QUEUED

    assert await hop(w2, run_id) is HopOutcome.SETTLED
    assert run_of(w2, run_id).result == {"verdicts": ["DENIED"]}


async def test_crash_after_checkpoint_before_consent_row_fails_as_lost() -> None:
    w = wait_world()
    run_id = await crash_at(w, faults.CONSENT_CHECKPOINT_SAVED, "consent_gate")
    assert tables(w).checkpoint_table[run_id].consent_id is not None
    assert tables(w).consent_table == {}

    w2, report = await restart(w)

    assert report.orphans == {OrphanVerdict.FAILED_LOST: [run_id]}
    run = run_of(w2, run_id)
    assert (run.status, run.error) == (RunStatus.FAILED, LOST)
    assert tables(w2).consent_table == {}
    assert tables(w2).delivery_table[(run_id, 0)].state is DeliveryState.FAILED


async def test_crash_after_the_agent_job_row_parks_awaiting_delegate() -> None:
    agents = FakeAgents()
    w = wait_world(agents=agents)
    run_id = await crash_at(w, faults.DELEGATE_SUBMITTED, "delegate")
    (job_id,) = tables(w).agent_job_table

    w2, report = await restart(w)

    assert report.orphans == {OrphanVerdict.PARKED_DELEGATE: [run_id]}
    run = run_of(w2, run_id)
    assert (run.status, run.agent_job_id) == (RunStatus.AWAITING_DELEGATE, job_id)
    assert tables(w2).delivery_table[(run_id, 0)].state is DeliveryState.SETTLED
    assert agents.submitted == [job_id]  # never a second job


async def test_a_delegate_window_whose_job_already_finished_is_parked_and_readmitted() -> None:
    agents = FakeAgents(on_submit=AgentJobStatus.SUCCEEDED, result={"text": "done"})
    w = wait_world(agents=agents)
    run_id = await crash_at(w, faults.DELEGATE_SUBMITTED, "delegate")
    (job_id,) = tables(w).agent_job_table

    w2, report = await restart(w)

    assert report.orphans == {OrphanVerdict.PARKED_DELEGATE: [run_id]}
    assert report.refired == [run_id]
    assert (run_of(w2, run_id).status, run_of(w2, run_id).seq) == (RunStatus.QUEUED, 1)
    assert await hop(w2, run_id) is HopOutcome.SETTLED
    assert run_of(w2, run_id).result == {"job": str(job_id), "answer": {"text": "done"}}


async def test_crash_after_the_delegate_checkpoint_before_the_job_row_fails_as_lost() -> None:
    agents = FakeAgents()
    w = wait_world(agents=agents)
    run_id = await crash_at(w, faults.DELEGATE_CHECKPOINT_SAVED, "delegate")

    w2, report = await restart(w)

    assert report.orphans == {OrphanVerdict.FAILED_LOST: [run_id]}
    assert (run_of(w2, run_id).status, run_of(w2, run_id).error) == (RunStatus.FAILED, LOST)
    assert agents.submitted == []


async def test_an_orphan_running_without_a_checkpoint_fails_as_lost() -> None:
    w = wait_world()
    run_id = await crash_at(w, faults.CLAIM_COMMITTED, "consent_gate")
    assert tables(w).checkpoint_table == {}

    w2, report = await restart(w)

    assert report.failed_orphans == [run_id]
    assert (run_of(w2, run_id).status, run_of(w2, run_id).error) == (RunStatus.FAILED, LOST)
    assert not report.degraded


async def test_an_awaiting_hardware_orphan_fails_as_lost() -> None:
    orchestrator = FakeOrchestrator()
    w = wait_world(PLAN, orchestrator=orchestrator)
    run_id = await crash_at(w, faults.HARDWARE_AWAITING, "plan", steps=["gpu"])
    assert run_of(w, run_id).status is RunStatus.AWAITING_HARDWARE
    assert run_id in tables(w).checkpoint_table  # the live wait's checkpoint is no park

    w2, report = await restart(w)

    assert report.failed_orphans == [run_id]
    run = run_of(w2, run_id)
    assert (run.status, run.error) == (RunStatus.FAILED, LOST)
    assert orchestrator.calls == []  # death came before the call; nothing is replayed


async def test_a_live_hop_of_the_current_boot_is_not_an_orphan() -> None:
    w = wait_world()
    run_id = await crash_at(w, faults.CONSENT_ROW_SAVED, "consent_gate")
    # The same boot id reconciling again sees its own claim: never classified.
    report = await reconcile_runs(w.engine, w.clock.now())
    assert report.orphans == {OrphanVerdict.LIVE: [run_id]}
    assert run_of(w, run_id).status is RunStatus.RUNNING


async def test_a_cancelled_consent_in_the_window_is_not_parked() -> None:
    w = wait_world()
    run_id = await crash_at(w, faults.CONSENT_ROW_SAVED, "consent_gate")
    (consent_id,) = tables(w).consent_table
    await w.ledger.cancel_consent(consent_id, w.clock.now())

    w2, report = await restart(w)

    assert report.orphans == {OrphanVerdict.FAILED_LOST: [run_id]}
    assert run_of(w2, run_id).status is RunStatus.FAILED
    assert tables(w2).consent_table[consent_id].status is ConsentStatus.CANCELLED
