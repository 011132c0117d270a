"""The JobStore contract (seed 004_85033eb8fc772f12.txt), run against every store.

Memory on both anyio backends; PostgreSQL on a fresh migrated database per
test, asyncio only (psycopg's AsyncConnection does not run under trio). The
memory store is the reference: each test states an observable rule and both
stores must answer it identically, timestamps included.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from uuid import UUID

import anyio
import pytest

from runtime.adapters.memory.jobs_store import MemoryJobStore
from runtime.adapters.postgres import migrate
from runtime.adapters.postgres.jobs_store import PostgresJobStore
from runtime.adapters.reference_model import ReferenceModelClient
from runtime.jobs import (
    AttemptClosed,
    AttemptFailure,
    CallBudgetExhausted,
    EventKind,
    EvidenceRecord,
    JobConflict,
    JobPolicy,
    JobState,
    JobStore,
    LeasedJob,
    LeaseExpired,
    ModelReply,
    ModelRequest,
    ModelVersionMismatch,
    NotLeaseOwner,
    NotReprocessable,
    Refusal,
    StagedResult,
    StaleFence,
    UnknownJob,
    Usage,
    WorkerContext,
    new_job,
    run_once,
)
from tests.contract.ledger_impls import LEDGER_KINDS, TRIO_SKIP
from tests.contract.ledger_records import at, uid
from tests.unit.fakes import FakeClock

pytestmark = pytest.mark.anyio

WS = "acme"
MODEL = "m-1"
USAGE = Usage(input_tokens=12, output_tokens=3)
BUNDLE = {"assertions": [{"subject": "name", "value": "Ada"}], "needs": None}


@pytest.fixture(params=LEDGER_KINDS)
async def store(request: pytest.FixtureRequest, anyio_backend: str) -> AsyncIterator[JobStore]:
    if request.param == "memory":
        yield MemoryJobStore()
        return
    if anyio_backend != "asyncio":
        pytest.skip(TRIO_SKIP)
    dsn = request.getfixturevalue("pg_fresh_dsn")
    await migrate(dsn)
    pg = await PostgresJobStore.connect(dsn, max_size=8)
    try:
        yield pg
    finally:
        await pg.close()


async def receive(
    store: JobStore,
    n: int = 1,
    *,
    workspace: str = WS,
    t: float = 0,
    payload: str = "name: Ada",
    policy: JobPolicy | None = None,
) -> LeasedJob:
    evidence = EvidenceRecord(
        id=uid(1000 + n), workspace=workspace, payload=payload, received_at=at(t)
    )
    job = new_job(uid(n), evidence, MODEL, at(t), policy or JobPolicy())
    return await store.receive(evidence, job)


async def claimed(store: JobStore, worker: str = "w1", t: float = 1) -> LeasedJob:
    job = await store.claim_one(WS, worker, at(t), 90)
    assert job is not None
    return job


def result(state: JobState = JobState.PUBLISHED, usage: Usage | None = USAGE) -> StagedResult:
    return StagedResult(state=state, bundle=BUNDLE, usage=usage)


async def current(store: JobStore, job_id: UUID) -> LeasedJob:
    job = await store.get(job_id)
    assert job is not None
    return job


# -- receipt ---------------------------------------------------------------------


async def test_receive_stores_evidence_and_job_and_round_trips_them(store: JobStore) -> None:
    job = await receive(store, payload="name: Ada\nborn: 1815")
    assert await store.get(job.id) == job
    evidence = await store.evidence(job.evidence_id)
    assert evidence is not None and evidence.payload == "name: Ada\nborn: 1815"
    assert evidence.received_at == at(0) and len(evidence.digest) == 64
    assert await store.jobs(WS) == [job]
    assert await store.jobs("other") == []


async def test_a_repeated_receipt_returns_the_stored_job(store: JobStore) -> None:
    job = await receive(store)
    await claimed(store)
    again = await receive(store)
    assert again == await current(store, job.id) and again.fence == 1


async def test_a_receipt_reusing_ids_for_other_content_is_refused(store: JobStore) -> None:
    job = await receive(store)
    with pytest.raises(JobConflict):
        await receive(store, payload="something else")
    evidence = await store.evidence(job.evidence_id)
    assert evidence is not None
    stranger = new_job(uid(1), evidence, "other-model", at(0))
    with pytest.raises(JobConflict):
        await store.receive(evidence, stranger)
    assert await store.jobs(WS) == [job]
    assert evidence.payload == "name: Ada"


async def test_a_job_must_arrive_fresh_and_with_its_own_evidence(store: JobStore) -> None:
    evidence = EvidenceRecord(id=uid(5), workspace=WS, payload="x", received_at=at(0))
    job = new_job(uid(6), evidence, MODEL, at(0))
    with pytest.raises(JobConflict):
        await store.receive(evidence, job.model_copy(update={"fence": 3}))
    with pytest.raises(JobConflict):
        await store.receive(evidence, job.model_copy(update={"evidence_id": uid(7)}))
    assert await store.get(job.id) is None and await store.evidence(evidence.id) is None


# -- claims ------------------------------------------------------------------------


async def test_claim_leases_the_oldest_eligible_job_of_the_workspace(store: JobStore) -> None:
    await receive(store, 2, t=1)
    first = await receive(store, 1, t=0)
    await receive(store, 3, workspace="other", t=-1)
    job = await claimed(store, t=5)
    assert job.id == first.id
    assert (job.fence, job.lease_owner, job.attempts_used) == (1, "w1", 1)
    assert job.lease_expires_at == at(95) and job.lease_renewed_at == at(5)
    assert job == await current(store, first.id)
    second = await claimed(store, "w2", t=5)
    assert second.id == uid(2)
    assert await store.claim_one(WS, "w3", at(5), 90) is None


async def test_concurrent_claims_never_share_a_job(store: JobStore) -> None:
    for n in range(1, 7):
        await receive(store, n, t=n)
    got: list[UUID] = []

    async def claim(i: int) -> None:
        job = await store.claim_one(WS, f"w{i}", at(100), 90)
        if job is not None:
            got.append(job.id)

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(claim, i)
    assert sorted(got) == [uid(n) for n in range(1, 7)]
    assert all(j.fence == 1 for j in await store.jobs(WS))


async def test_retry_scheduled_is_claimable_only_once_due(store: JobStore) -> None:
    job = await receive(store)
    await claimed(store)
    await store.schedule_retry(job.id, 1, "w1", at(30), AttemptFailure(reason="429"), at(2))
    assert await store.claim_one(WS, "w2", at(29), 90) is None
    again = await store.claim_one(WS, "w2", at(30), 90)
    assert again is not None and again.state is JobState.QUEUED and again.retry_at is None
    assert again.fence == 2


async def test_a_lapsed_lease_is_reclaimed_and_logged(store: JobStore) -> None:
    job = await receive(store)
    await claimed(store, "w1", t=1)
    assert await store.claim_one(WS, "w2", at(90.5), 90) is None
    taken = await store.claim_one(WS, "w2", at(91), 90)
    assert taken is not None and (taken.fence, taken.lease_owner) == (2, "w2")
    (event,) = await store.attempts(job.id)
    assert (event.kind, event.fence, event.worker, event.at) == (
        EventKind.EXPIRED_LEASE,
        1,
        "w1",
        at(91),
    )


async def test_a_candidate_without_budget_is_exhausted_instead_of_claimed(
    store: JobStore,
) -> None:
    spent = await receive(store, 1, policy=JobPolicy(max_attempts=1))
    fresh = await receive(store, 2, t=1)
    await claimed(store, "w1", t=2)
    taken = await store.claim_one(WS, "w2", at(100), 90)
    assert taken is not None and taken.id == fresh.id
    gone = await current(store, spent.id)
    assert gone.state is JobState.EXHAUSTED and gone.lease_owner is None
    assert [e.kind for e in await store.attempts(spent.id)] == [
        EventKind.EXPIRED_LEASE,
        EventKind.FAILED,
    ]


async def test_waiting_and_terminal_jobs_are_not_claimed(store: JobStore) -> None:
    job = await receive(store)
    await claimed(store)
    await store.stage(job.id, 1, "w1", MODEL, result(JobState.WAITING_IDENTITY), at(2))
    assert await store.claim_one(WS, "w2", at(1000), 90) is None


# -- lease and fence -------------------------------------------------------------------


async def test_renew_is_rate_limited_and_extends_a_live_lease(store: JobStore) -> None:
    job = await receive(store)
    lease = await claimed(store, t=1)
    assert await store.renew(job.id, 1, "w1", at(20)) == lease
    renewed = await store.renew(job.id, 1, "w1", at(21))
    assert renewed.lease_expires_at == at(111) and renewed.lease_renewed_at == at(21)
    with pytest.raises(NotLeaseOwner):
        await store.renew(job.id, 1, "w2", at(50))
    with pytest.raises(LeaseExpired):
        await store.renew(job.id, 1, "w1", at(111))
    assert await current(store, job.id) == renewed


async def test_stage_publishes_under_the_live_lease_and_records_the_interpretation(
    store: JobStore,
) -> None:
    job = await receive(store)
    await claimed(store)
    await store.reserve_model_call(job.id, 1, "w1", at(2))
    done = await store.stage(job.id, 1, "w1", MODEL, result(), at(3))
    assert done.state is JobState.PUBLISHED and done.bundle == BUNDLE
    assert (done.lease_owner, done.lease_expires_at, done.settled_fence) == (None, None, 1)
    assert done == await current(store, job.id)
    (interp,) = await store.interpretations(job.id)
    assert (interp.number, interp.fence, interp.usage, interp.accepted) == (1, 1, USAGE, True)
    assert interp.created_at == at(3)
    assert await store.stage(job.id, 1, "w1", MODEL, result(), at(4)) == done  # repeat
    with pytest.raises(AttemptClosed):
        await store.stage(job.id, 1, "w1", MODEL, result(JobState.WAITING_REVIEW), at(4))


async def test_a_refused_stage_keeps_its_usage_and_changes_nothing_else(
    store: JobStore,
) -> None:
    job = await receive(store)
    await claimed(store, "w1", t=1)
    await store.reserve_model_call(job.id, 1, "w1", at(2))
    await store.claim_one(WS, "w2", at(95), 90)
    before = await current(store, job.id)
    with pytest.raises(StaleFence):
        await store.stage(job.id, 1, "w1", MODEL, result(), at(96))
    with pytest.raises(NotLeaseOwner):
        await store.stage(job.id, 2, "w1", MODEL, result(usage=None), at(96))
    with pytest.raises(ModelVersionMismatch):
        await store.stage(job.id, 2, "w2", "m-2", result(), at(96))
    with pytest.raises(LeaseExpired):
        await store.stage(job.id, 2, "w2", MODEL, result(), at(185))
    assert await current(store, job.id) == before
    assert await store.interpretations(job.id) == []
    refused = [(e.fence, e.refused, e.usage) for e in await store.attempts(job.id) if e.refused]
    assert refused == [
        (1, Refusal.STALE_FENCE, USAGE),
        (2, Refusal.NOT_OWNER, None),
        (2, Refusal.MODEL_VERSION, USAGE),
        (2, Refusal.LEASE_EXPIRED, USAGE),
    ]


async def test_a_refused_closing_keeps_the_usage_its_failure_carries(store: JobStore) -> None:
    """Seed 004 "Alpha.2 accounting": returned usage is kept even when fenced out
    (found by the simulator: a model error's usage was dropped when its retry was
    refused after the worker stalled past its lease)."""
    job = await receive(store)
    await claimed(store, "w1", t=1)
    await store.reserve_model_call(job.id, 1, "w1", at(2))
    await store.claim_one(WS, "w2", at(95), 90)
    before = await current(store, job.id)
    with pytest.raises(StaleFence):
        await store.schedule_retry(
            job.id, 1, "w1", at(99), AttemptFailure(reason="503", usage=USAGE), at(96)
        )
    with pytest.raises(StaleFence):
        await store.fail(job.id, 1, "w1", AttemptFailure(reason="no usage"), at(96))
    assert await current(store, job.id) == before
    refused = [
        (e.kind, e.fence, e.interpretation, e.refused, e.usage)
        for e in await store.attempts(job.id)
        if e.refused
    ]
    assert refused == [(EventKind.FAILED, 1, 1, Refusal.STALE_FENCE, USAGE)]


async def test_every_fenced_write_refuses_a_stale_fence(store: JobStore) -> None:
    job = await receive(store)
    await claimed(store, "w1", t=1)
    await store.claim_one(WS, "w2", at(91), 90)
    before = await current(store, job.id)
    failure = AttemptFailure(reason="late")
    with pytest.raises(StaleFence):
        await store.renew(job.id, 1, "w1", at(92))
    with pytest.raises(StaleFence):
        await store.reserve_model_call(job.id, 1, "w1", at(92))
    with pytest.raises(StaleFence):
        await store.schedule_retry(job.id, 1, "w1", at(99), failure, at(92))
    with pytest.raises(StaleFence):
        await store.fail(job.id, 1, "w1", failure, at(92))
    with pytest.raises(StaleFence):
        await store.exhaust(job.id, 1, "w1", failure, at(92))
    assert await current(store, job.id) == before


async def test_operations_on_an_unknown_job_are_refused_and_write_nothing(
    store: JobStore,
) -> None:
    ghost = uid(404)
    with pytest.raises(UnknownJob):
        await store.stage(ghost, 1, "w1", MODEL, result(), at(1))
    with pytest.raises(UnknownJob):
        await store.reserve_model_call(ghost, 1, "w1", at(1))
    with pytest.raises(UnknownJob):
        await store.fail(ghost, 1, "w1", AttemptFailure(reason="x"), at(1))
    with pytest.raises(UnknownJob):
        await store.reprocess(ghost, at(1))
    assert await store.get(ghost) is None
    assert await store.attempts(ghost) == [] and await store.interpretations(ghost) == []


# -- budgets ----------------------------------------------------------------------------


async def test_model_calls_are_reserved_with_a_started_event_and_bounded(
    store: JobStore,
) -> None:
    job = await receive(store)
    await claimed(store)
    one = await store.reserve_model_call(job.id, 1, "w1", at(2))
    two = await store.reserve_model_call(job.id, 1, "w1", at(3))
    assert (one.model_calls_reserved, two.model_calls_reserved) == (1, 2)
    with pytest.raises(CallBudgetExhausted):
        await store.reserve_model_call(job.id, 1, "w1", at(4))
    events = await store.attempts(job.id)
    assert [(e.kind, e.call, e.usage, e.worker) for e in events] == [
        (EventKind.STARTED, 1, None, "w1"),
        (EventKind.STARTED, 2, None, "w1"),
    ]


async def test_retry_becomes_exhausted_when_budgets_are_spent(store: JobStore) -> None:
    job = await receive(store)
    await claimed(store)
    await store.reserve_model_call(job.id, 1, "w1", at(2))
    failure = AttemptFailure(reason="503", usage=USAGE)
    first = await store.schedule_retry(job.id, 1, "w1", at(10), failure, at(3))
    assert first.state is JobState.RETRY_SCHEDULED and first.retry_at == at(10)
    assert first.error == "503" and first.lease_owner is None
    again = await store.claim_one(WS, "w1", at(10), 90)
    assert again is not None
    await store.reserve_model_call(job.id, 2, "w1", at(11))
    second = await store.schedule_retry(job.id, 2, "w1", at(40), failure, at(12))
    assert second.state is JobState.EXHAUSTED and second.retry_at is None
    assert second.error == "503; model call budget spent"
    assert await store.schedule_retry(job.id, 2, "w1", at(40), failure, at(13)) == second


async def test_fail_and_exhaust_keep_the_job_inspectable(store: JobStore) -> None:
    a = await receive(store, 1)
    b = await receive(store, 2, t=1)
    await claimed(store, "w1", t=2)
    await claimed(store, "w2", t=2)
    diag = {"output": {"assertions": "oops"}, "n": [1, 2]}
    failed = await store.fail(
        a.id, 1, "w1", AttemptFailure(reason="invalid", usage=USAGE, diagnostic=diag), at(3)
    )
    assert (failed.state, failed.error, failed.diagnostic) == (JobState.FAILED, "invalid", diag)
    spent = await store.exhaust(b.id, 1, "w2", AttemptFailure(reason="budget"), at(3))
    assert spent.state is JobState.EXHAUSTED and spent.error == "budget"
    assert await current(store, a.id) == failed
    assert await store.evidence(a.evidence_id) is not None
    (event,) = await store.attempts(a.id)
    assert (event.kind, event.usage, event.detail) == (
        EventKind.FAILED,
        USAGE,
        "failed: invalid",
    )


# -- reprocess ----------------------------------------------------------------------------


async def test_reprocess_adds_an_interpretation_and_keeps_accepted_ones(
    store: JobStore,
) -> None:
    job = await receive(store)
    await claimed(store)
    published = await store.stage(job.id, 1, "w1", MODEL, result(), at(2))
    again = await store.reprocess(job.id, at(3))
    assert (again.state, again.interpretation) == (JobState.QUEUED, 2)
    assert (again.attempts_used, again.model_calls_reserved) == (0, 0)
    assert again.bundle == published.bundle and again.fence == 1
    with pytest.raises(NotReprocessable):
        await store.reprocess(job.id, at(4))
    second = await store.claim_one(WS, "w1", at(5), 90)
    assert second is not None and second.fence == 2
    await store.reserve_model_call(job.id, 2, "w1", at(6))
    await store.stage(job.id, 2, "w1", MODEL, result(JobState.WAITING_REVIEW), at(7))
    one, two = await store.interpretations(job.id)
    assert (one.number, one.accepted, one.fence) == (1, True, 1)
    assert (two.number, two.accepted, two.fence) == (2, False, 2)
    logged = [(e.kind.value, e.interpretation) for e in await store.attempts(job.id)]
    assert logged == [("completed", 1), ("started", 2), ("completed", 2)]


async def test_a_late_reply_is_logged_under_the_interpretation_it_answered(
    store: JobStore,
) -> None:
    job = await receive(store)
    await claimed(store, "w1", t=1)
    await store.reserve_model_call(job.id, 1, "w1", at(2))
    await store.claim_one(WS, "w2", at(91), 90)
    await store.stage(job.id, 2, "w2", MODEL, result(), at(92))
    await store.reprocess(job.id, at(93))
    with pytest.raises(StaleFence):
        await store.stage(job.id, 1, "w1", MODEL, result(), at(94))
    late = (await store.attempts(job.id))[-1]
    assert (late.fence, late.interpretation, late.refused) == (1, 1, Refusal.STALE_FENCE)


async def test_the_attempt_log_is_ordered_and_timestamped(store: JobStore) -> None:
    job = await receive(store)
    await claimed(store, "w1", t=1)
    await store.reserve_model_call(job.id, 1, "w1", at(2))
    taken = await store.claim_one(WS, "w2", at(200), 90)
    assert taken is not None
    await store.reserve_model_call(job.id, 2, "w2", at(201))
    await store.stage(job.id, 2, "w2", MODEL, result(), at(202) + timedelta(microseconds=7))
    events = await store.attempts(job.id)
    assert [(e.index, e.kind.value, e.at) for e in events] == [
        (0, "started", at(2)),
        (1, "expired_lease", at(200)),
        (2, "started", at(201)),
        (3, "completed", at(202) + timedelta(microseconds=7)),
    ]


# -- the worker step over each store ------------------------------------------------


async def test_run_once_over_the_store_fences_out_a_late_reply(store: JobStore) -> None:
    clock = FakeClock(at(0))
    model = ReferenceModelClient(version=MODEL)
    job = await receive(store, payload="name: Ada")

    def ctx(worker: str) -> WorkerContext:
        return WorkerContext(
            store=store, model=model, clock=clock, workspace=WS, worker_id=worker, scopes=(WS,)
        )

    async def stall(request: ModelRequest) -> ModelReply:
        clock.advance(100)
        newer = await run_once(ctx("w2"))
        assert newer is not None and newer.state is JobState.PUBLISHED
        return ModelReply(model_version=MODEL, output={"assertions": []}, usage=USAGE)

    model.script.append(stall)
    after = await run_once(ctx("w1"))
    assert after is not None and after.fence == 2 and after.bundle == BUNDLE
    assert [i.fence for i in await store.interpretations(job.id)] == [2]
    kinds = [(e.kind.value, e.fence, e.refused) for e in await store.attempts(job.id)]
    assert kinds == [
        ("started", 1, None),
        ("expired_lease", 1, None),
        ("started", 2, None),
        ("completed", 2, None),
        ("completed", 1, Refusal.STALE_FENCE),
    ]


async def test_reads_hand_back_fresh_ids(store: JobStore) -> None:
    """Every read decodes its own copy, as a PostgreSQL row does: equal ids, never the
    objects written, so an identity test (`is`) of a lease owner, job id or evidence id
    fails on every store alike (issue M9; runtime/adapters/memory/fresh.py)."""
    worker = "-".join(("worker", "w1"))  # built, not interned
    await receive(store)
    job = await claimed(store, worker)
    assert job.lease_owner == worker  # a claim may hand back what it was given
    for got in (await current(store, job.id), *await store.jobs(WS)):
        assert got == job
        assert got.lease_owner is not worker and got.lease_owner is not job.lease_owner
        assert got.id is not job.id
        assert got.evidence_id is not job.evidence_id
    evidence = await store.evidence(job.evidence_id)
    assert evidence is not None and evidence.id == job.evidence_id
    assert evidence.id is not job.evidence_id
