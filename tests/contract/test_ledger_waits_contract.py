"""The Ledger contract for durable waits, run against every implementation.

Checkpoints, consent, delegation, hardware stasis and cancellation as the
Ledger protocol states them (seed 000_81a5c720b14d934a.txt, "Events,
settlement, and waits"; seed 003_9b07f1601fdd86c6.txt); the memory ledger is
the reference.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from runtime.models import (
    AgentJob,
    AgentJobStatus,
    CheckpointRecord,
    Consent,
    ConsentStatus,
    DeliveryState,
    ResumeMode,
    Run,
    RunStatus,
    Settlement,
)
from runtime.seams import Ledger
from tests.contract.ledger_records import at, make_delivery, make_run, uid

pytestmark = pytest.mark.anyio

DONE = Settlement(status=RunStatus.DONE, result={"ok": True})


async def running(ledger: Ledger, n: int = 1, boot: str = "boot-a") -> Run:
    run = make_run(uid(n), priority=70)
    await ledger.admit_run(run, make_delivery(run))
    claim = await ledger.claim_delivery(run.id, 0, boot, f"tok-{n}", at(1))
    assert claim.claimed and claim.run is not None
    return claim.run


def checkpoint(
    run_id: UUID,
    seq: int = 0,
    *,
    consent: UUID | None = None,
    job: UUID | None = None,
    t: float = 2,
    doc: dict[str, object] | None = None,
) -> CheckpointRecord:
    return CheckpointRecord(
        run_id=run_id,
        seq=seq,
        document=doc if doc is not None else {"history": [{"node": "ask", "status": "pending"}]},
        consent_id=consent,
        agent_job_id=job,
        updated_at=at(t),
    )


def consent(n: int, run_id: UUID, seq: int = 0, t: float = 2) -> Consent:
    return Consent(
        id=uid(100 + n), run_id=run_id, seq=seq, node="gate", prompt="ok?", owner="alice",
        created_at=at(t),
    )  # fmt: skip


def job(n: int, run_id: UUID, seq: int = 0, t: float = 2) -> AgentJob:
    return AgentJob(
        id=uid(200 + n), run_id=run_id, seq=seq, node="delegate", request={"task": "sum"},
        created_at=at(t), updated_at=at(t),
    )  # fmt: skip


# -- checkpoints ----------------------------------------------------------------


async def test_checkpoint_is_saved_only_by_the_live_hop(ledger: Ledger) -> None:
    run = await running(ledger)
    first = checkpoint(run.id)
    assert await ledger.save_checkpoint(first) is True
    assert await ledger.load_checkpoint(run.id) == first
    second = checkpoint(run.id, t=3, doc={"history": []}, consent=uid(7))
    assert await ledger.save_checkpoint(second) is True  # the one document is replaced
    assert await ledger.load_checkpoint(run.id) == second
    assert await ledger.save_checkpoint(checkpoint(run.id, seq=1)) is False  # another hop
    assert await ledger.await_hardware(run.id, 0, at(4)) is not None
    assert await ledger.save_checkpoint(checkpoint(run.id, t=5)) is True  # hardware wait
    queued = make_run(uid(2))
    await ledger.admit_run(queued, make_delivery(queued))
    assert await ledger.save_checkpoint(checkpoint(queued.id)) is False
    assert await ledger.save_checkpoint(checkpoint(uid(9))) is False
    assert await ledger.load_checkpoint(queued.id) is None


async def test_checkpoint_is_deleted_only_after_terminal_truth(ledger: Ledger) -> None:
    run = await running(ledger)
    await ledger.save_checkpoint(checkpoint(run.id))
    assert await ledger.delete_checkpoint(run.id) is False
    assert await ledger.load_checkpoint(run.id) is not None
    await ledger.settle_run(run.id, 0, DONE, at(5))
    assert await ledger.delete_checkpoint(run.id) is True
    assert await ledger.load_checkpoint(run.id) is None
    assert await ledger.delete_checkpoint(run.id) is True  # idempotent
    assert await ledger.delete_checkpoint(uid(9)) is False


async def test_checkpoint_debts_list_terminal_runs_still_holding_one(ledger: Ledger) -> None:
    """Seed 000 "Events, settlement, and waits": cleanup that failed stays owed."""
    live, owed, paid = [await running(ledger, n) for n in (1, 2, 3)]
    for run in (live, owed, paid):
        await ledger.save_checkpoint(checkpoint(run.id))
    assert await ledger.checkpoint_debts(10) == []  # nonterminal checkpoints are no debt
    await ledger.settle_run(owed.id, 0, DONE, at(5))
    await ledger.settle_run(paid.id, 0, DONE, at(5))
    assert await ledger.checkpoint_debts(10) == sorted([owed.id, paid.id], key=str)
    assert await ledger.checkpoint_debts(1) == sorted([owed.id, paid.id], key=str)[:1]
    await ledger.delete_checkpoint(paid.id)
    assert await ledger.checkpoint_debts(10) == [owed.id]
    await ledger.delete_checkpoint(owed.id)
    assert await ledger.checkpoint_debts(10) == []
    assert await ledger.load_checkpoint(live.id) is not None


# -- consent -------------------------------------------------------------------------


async def test_consent_is_created_once_by_the_live_hop(ledger: Ledger) -> None:
    run = await running(ledger)
    c = consent(1, run.id)
    assert await ledger.create_consent(c) == c
    altered = c.model_copy(update={"prompt": "something else"})
    assert await ledger.create_consent(altered) == c  # a repeat returns the stored row
    assert await ledger.create_consent(consent(2, run.id, seq=1)) is None
    assert await ledger.create_consent(consent(3, uid(9))) is None
    earlier = consent(4, run.id, t=1)
    await ledger.create_consent(earlier)
    assert await ledger.consents_of(run.id) == [earlier, c]
    assert await ledger.get_consent(c.id) == c
    assert await ledger.get_consent(uid(999)) is None


async def test_consent_decision_and_cancellation_apply_to_pending_only(ledger: Ledger) -> None:
    run = await running(ledger)
    a, b = consent(1, run.id), consent(2, run.id)
    await ledger.create_consent(a)
    await ledger.create_consent(b)
    decided = await ledger.decide_consent(a.id, False, "bob", at(6))
    assert decided == a.model_copy(
        update={"status": ConsentStatus.DENIED, "decided_by": "bob", "decided_at": at(6)}
    )
    assert await ledger.decide_consent(a.id, True, "carol", at(7)) == decided
    assert await ledger.cancel_consent(a.id, at(7)) == decided
    cancelled = await ledger.cancel_consent(b.id, at(8))
    assert cancelled == b.model_copy(update={"status": ConsentStatus.CANCELLED})
    assert await ledger.decide_consent(b.id, True, "bob", at(9)) == cancelled
    assert await ledger.decide_consent(uid(999), True, "bob", at(9)) is None
    assert await ledger.cancel_consent(uid(999), at(9)) is None


async def test_park_consent_verifies_checkpoint_and_owner(ledger: Ledger) -> None:
    run = await running(ledger)
    c = consent(1, run.id)
    await ledger.create_consent(c)
    assert await ledger.park_consent(run.id, 0, c.id, at(3)) is None  # no checkpoint yet
    await ledger.save_checkpoint(checkpoint(run.id, consent=uid(55)))
    assert await ledger.park_consent(run.id, 0, c.id, at(3)) is None  # binds another consent
    await ledger.save_checkpoint(checkpoint(run.id, consent=c.id))
    assert await ledger.park_consent(run.id, 1, c.id, at(3)) is None  # another hop
    parked = await ledger.park_consent(run.id, 0, c.id, at(4))
    assert parked == run.model_copy(
        update={"status": RunStatus.AWAITING_CONSENT, "consent_id": c.id, "updated_at": at(4)}
    )
    delivery = await ledger.get_delivery(run.id, 0)
    assert delivery is not None
    assert (delivery.state, delivery.updated_at) == (DeliveryState.SETTLED, at(4))
    assert await ledger.park_consent(run.id, 0, c.id, at(5)) == parked  # repeat


async def test_park_consent_refuses_a_cancelled_consent(ledger: Ledger) -> None:
    run = await running(ledger)
    c = consent(1, run.id)
    await ledger.create_consent(c)
    await ledger.save_checkpoint(checkpoint(run.id, consent=c.id))
    await ledger.cancel_consent(c.id, at(3))
    assert await ledger.park_consent(run.id, 0, c.id, at(4)) is None


async def test_readmit_after_consent_needs_the_decided_owner(ledger: Ledger) -> None:
    run = await running(ledger)
    c = consent(1, run.id)
    await ledger.create_consent(c)
    await ledger.save_checkpoint(checkpoint(run.id, consent=c.id))
    await ledger.park_consent(run.id, 0, c.id, at(4))
    assert await ledger.readmit_after_consent(run.id, c.id, at(5)) is None  # undecided
    await ledger.decide_consent(c.id, True, "alice", at(6))
    assert await ledger.readmit_after_consent(run.id, uid(55), at(7)) is None  # not the owner
    fresh = await ledger.readmit_after_consent(run.id, c.id, at(7))
    assert fresh is not None
    assert (fresh.seq, fresh.state, fresh.mode) == (1, DeliveryState.PENDING, ResumeMode.RESUME)
    assert (fresh.queue, fresh.priority, fresh.created_at) == ("runs", 70, at(7))
    stored = await ledger.get_run(run.id)
    assert stored is not None
    assert (stored.status, stored.seq, stored.consent_id) == (RunStatus.QUEUED, 1, c.id)
    assert await ledger.readmit_after_consent(run.id, c.id, at(8)) is None  # CAS already done
    assert await ledger.claim_delivery(run.id, 1, "boot-a", "t2", at(9)) is not None


# -- delegation ----------------------------------------------------------------------


async def test_agent_job_is_created_once_and_keeps_terminal_truth(ledger: Ledger) -> None:
    run = await running(ledger)
    j = job(1, run.id)
    assert await ledger.create_agent_job(j) == j
    assert await ledger.create_agent_job(j.model_copy(update={"node": "other"})) == j
    assert await ledger.create_agent_job(job(2, run.id, seq=3)) is None
    running_job = await ledger.record_agent_job(j.id, AgentJobStatus.RUNNING, None, at(3))
    assert running_job == j.model_copy(
        update={"status": AgentJobStatus.RUNNING, "updated_at": at(3)}
    )
    done = await ledger.record_agent_job(j.id, AgentJobStatus.SUCCEEDED, {"sum": 3}, at(4))
    assert done is not None and done.result == {"sum": 3}
    assert await ledger.record_agent_job(j.id, AgentJobStatus.FAILED, None, at(5)) == done
    assert await ledger.record_agent_job(uid(999), AgentJobStatus.FAILED, None, at(5)) is None
    assert await ledger.agent_jobs_of(run.id) == [done]
    assert await ledger.get_agent_job(j.id) == done


async def test_a_lost_job_may_still_be_contained(ledger: Ledger) -> None:
    run = await running(ledger)
    j = job(1, run.id)
    await ledger.create_agent_job(j)
    lost = await ledger.record_agent_job(j.id, AgentJobStatus.LOST, None, at(3))
    contained = await ledger.record_agent_job(j.id, AgentJobStatus.CANCELLED, None, at(4))
    assert lost is not None and contained is not None
    assert contained.status is AgentJobStatus.CANCELLED
    assert await ledger.record_agent_job(j.id, AgentJobStatus.LOST, None, at(5)) == contained


async def test_park_and_readmit_after_delegate(ledger: Ledger) -> None:
    run = await running(ledger)
    j = job(1, run.id)
    await ledger.create_agent_job(j)
    assert await ledger.park_delegate(run.id, 0, j.id, at(3)) is None  # no checkpoint
    await ledger.save_checkpoint(checkpoint(run.id, job=j.id))
    parked = await ledger.park_delegate(run.id, 0, j.id, at(4))
    assert parked == run.model_copy(
        update={"status": RunStatus.AWAITING_DELEGATE, "agent_job_id": j.id, "updated_at": at(4)}
    )
    assert await ledger.park_delegate(run.id, 0, j.id, at(5)) == parked
    assert await ledger.readmit_after_delegate(run.id, j.id, at(6)) is None  # not terminal
    await ledger.record_agent_job(j.id, AgentJobStatus.SUCCEEDED, {"sum": 3}, at(7))
    fresh = await ledger.readmit_after_delegate(run.id, j.id, at(8))
    assert fresh is not None and (fresh.seq, fresh.mode) == (1, ResumeMode.RESUME)
    assert await ledger.readmit_after_delegate(run.id, j.id, at(9)) is None


# -- hardware ----------------------------------------------------------------------------


async def test_hardware_wait_keeps_the_claim_and_can_settle(ledger: Ledger) -> None:
    run = await running(ledger)
    waiting = await ledger.await_hardware(run.id, 0, at(3))
    assert waiting == run.model_copy(
        update={"status": RunStatus.AWAITING_HARDWARE, "updated_at": at(3)}
    )
    assert await ledger.await_hardware(run.id, 0, at(4)) == waiting  # repeat
    assert await ledger.await_hardware(run.id, 1, at(4)) is None
    back = await ledger.resume_hardware(run.id, 0, at(5))
    assert back is not None and back.status is RunStatus.RUNNING
    assert await ledger.resume_hardware(run.id, 0, at(6)) == back  # repeat
    await ledger.await_hardware(run.id, 0, at(7))
    settled = await ledger.settle_run(run.id, 0, DONE, at(8))  # the claimant settles mid-wait
    assert settled is not None and settled.status is RunStatus.DONE
    assert await ledger.await_hardware(run.id, 0, at(9)) is None
    assert await ledger.resume_hardware(run.id, 0, at(9)) is None
    queued = make_run(uid(2))
    await ledger.admit_run(queued, make_delivery(queued))
    assert await ledger.await_hardware(queued.id, 0, at(9)) is None


# -- cancellation --------------------------------------------------------------------------


async def test_cancel_closes_the_claimed_hop_and_pending_consents(ledger: Ledger) -> None:
    run = await running(ledger)
    pending, decided = consent(1, run.id), consent(2, run.id)
    await ledger.create_consent(pending)
    await ledger.create_consent(decided)
    decided_row = await ledger.decide_consent(decided.id, True, "bob", at(3))
    cancelling = await ledger.begin_cancel(run.id, at(4))
    assert cancelling == run.model_copy(
        update={"status": RunStatus.CANCELLING, "updated_at": at(4)}
    )
    assert await ledger.begin_cancel(run.id, at(5)) == cancelling  # repeat
    assert await ledger.finish_cancel(run.id, 1, at(6)) is None  # another generation
    cancelled = await ledger.finish_cancel(run.id, 0, at(6))
    assert cancelled == cancelling.model_copy(
        update={"status": RunStatus.CANCELLED, "updated_at": at(6)}
    )
    assert await ledger.finish_cancel(run.id, 0, at(7)) == cancelled  # repeat
    delivery = await ledger.get_delivery(run.id, 0)
    assert delivery is not None and delivery.state is DeliveryState.SETTLED
    assert await ledger.consents_of(run.id) == [
        pending.model_copy(update={"status": ConsentStatus.CANCELLED}),
        decided_row,
    ]
    assert await ledger.begin_cancel(run.id, at(8)) == cancelled  # terminal: as is


async def test_cancel_of_an_unclaimed_run_fails_its_delivery(ledger: Ledger) -> None:
    queued = make_run(uid(1))
    await ledger.admit_run(queued, make_delivery(queued))
    assert await ledger.finish_cancel(queued.id, 0, at(2)) is None  # not cancelling
    await ledger.begin_cancel(queued.id, at(2))
    done = await ledger.finish_cancel(queued.id, 0, at(3))
    assert done is not None and done.status is RunStatus.CANCELLED
    delivery = await ledger.get_delivery(queued.id, 0)
    assert delivery is not None and delivery.state is DeliveryState.FAILED
    assert await ledger.begin_cancel(uid(9), at(3)) is None
    assert await ledger.finish_cancel(uid(9), 0, at(3)) is None


async def test_dump_orders_wait_records(ledger: Ledger) -> None:
    r1, r2 = await running(ledger, 1), await running(ledger, 2)
    await ledger.create_consent(consent(2, r1.id, t=5))
    await ledger.create_consent(consent(1, r2.id, t=5))
    await ledger.create_consent(consent(3, r2.id, t=4))
    await ledger.create_agent_job(job(2, r2.id, t=3))
    await ledger.create_agent_job(job(1, r1.id, t=3))
    await ledger.save_checkpoint(checkpoint(r2.id))
    await ledger.save_checkpoint(checkpoint(r1.id))
    dump = await ledger.dump()
    assert [c.id for c in dump.consents] == [uid(103), uid(101), uid(102)]
    assert [j.id for j in dump.agent_jobs] == [uid(201), uid(202)]
    assert [c.run_id for c in dump.checkpoints] == [r1.id, r2.id]
