"""`JobStore.withdraw`: containing a leased job whose owner cancelled it.

Seed 000_81a5c720b14d934a.txt ("Delegated AgentJob labor": parent
cancellation calls the owning runtime's containment and records CANCELLED
only after it returns) over seed 004's leases: a live lease is never
overridden, a pending or waiting job without one stops being claimable,
and nothing is lost. Memory and PostgreSQL answer identically.
"""

from __future__ import annotations

import pytest

from runtime.jobs import (
    AttemptClosed,
    AttemptFailure,
    EventKind,
    JobState,
    JobStore,
    StagedResult,
    UnknownJob,
)
from runtime.jobs.rules import contained
from tests.contract.ledger_records import at, uid
from tests.contract.test_job_store_contract import (
    BUNDLE,
    MODEL,
    USAGE,
    WS,
    claimed,
    current,
    receive,
)
from tests.contract.test_job_store_contract import store as job_store

store = job_store  # the contract suite's parametrised fixture (memory + PostgreSQL)

pytestmark = pytest.mark.anyio

REASON = "withdrawn: the delegating Run was cancelled"


async def test_a_queued_job_is_withdrawn_to_failed_and_never_claimed(store: JobStore) -> None:
    job = await receive(store)
    assert not contained(job, at(1))

    withdrawn = await store.withdraw(job.id, REASON, at(1))

    assert withdrawn.state is JobState.FAILED and withdrawn.error == REASON
    assert withdrawn.diagnostic == {"withdrawn_from": "queued"}
    assert contained(withdrawn, at(1))
    assert await current(store, job.id) == withdrawn
    assert await store.claim_one(WS, "w1", at(2), 90) is None
    evidence = await store.evidence(job.evidence_id)
    assert evidence is not None and evidence.payload == "name: Ada"
    (event,) = await store.attempts(job.id)
    assert (event.kind, event.detail) == (EventKind.FAILED, f"failed: {REASON}")


async def test_a_live_lease_is_never_overridden(store: JobStore) -> None:
    job = await receive(store)
    lease = await claimed(store, "w1", t=1)

    held = await store.withdraw(job.id, REASON, at(2))

    assert held == lease and not contained(held, at(2))
    staged = await store.stage(
        job.id, lease.fence, "w1", MODEL, StagedResult(bundle=BUNDLE, usage=USAGE), at(3)
    )
    assert staged.state is JobState.PUBLISHED
    assert contained(staged, at(3))
    assert await store.withdraw(job.id, REASON, at(4)) == staged  # ended: kept as it is


async def test_a_lapsed_lease_is_closed_and_its_late_result_refused(store: JobStore) -> None:
    job = await receive(store)
    lease = await claimed(store, "w1", t=1)
    await store.reserve_model_call(job.id, lease.fence, "w1", at(2))

    withdrawn = await store.withdraw(job.id, REASON, at(1 + 90))

    assert withdrawn.state is JobState.FAILED and withdrawn.lease_owner is None
    assert withdrawn.settled_fence == lease.fence and withdrawn.model_calls_reserved == 1
    assert withdrawn.attempts_used == 1
    kinds = [e.kind for e in await store.attempts(job.id)]
    assert kinds == [EventKind.STARTED, EventKind.EXPIRED_LEASE, EventKind.FAILED]
    with pytest.raises(AttemptClosed):
        await store.stage(
            job.id, lease.fence, "w1", MODEL, StagedResult(bundle=BUNDLE, usage=USAGE), at(92)
        )
    assert (await current(store, job.id)).state is JobState.FAILED
    assert await store.interpretations(job.id) == []


async def test_a_retry_scheduled_job_is_withdrawn_before_it_is_due(store: JobStore) -> None:
    job = await receive(store)
    lease = await claimed(store, "w1", t=1)
    await store.schedule_retry(
        job.id, lease.fence, "w1", at(60), AttemptFailure(reason="overloaded"), at(2)
    )

    withdrawn = await store.withdraw(job.id, REASON, at(3))

    assert withdrawn.state is JobState.FAILED and withdrawn.retry_at is None
    assert await store.claim_one(WS, "w2", at(61), 90) is None
    with pytest.raises(AttemptClosed):  # the closed attempt cannot come back to life
        await store.renew(job.id, lease.fence, "w1", at(4))


async def test_a_waiting_job_is_withdrawn_and_its_interpretation_kept(store: JobStore) -> None:
    job = await receive(store)
    lease = await claimed(store, "w1", t=1)
    waiting = await store.stage(
        job.id,
        lease.fence,
        "w1",
        MODEL,
        StagedResult(state=JobState.WAITING_REVIEW, bundle={**BUNDLE, "needs": "review"}),
        at(2),
    )
    assert not contained(waiting, at(3))

    withdrawn = await store.withdraw(job.id, REASON, at(3))

    assert withdrawn.state is JobState.FAILED and contained(withdrawn, at(3))
    (kept,) = await store.interpretations(job.id)
    assert kept.state is JobState.WAITING_REVIEW


async def test_withdrawing_an_unknown_job_is_refused(store: JobStore) -> None:
    with pytest.raises(UnknownJob):
        await store.withdraw(uid(99), REASON, at(1))
