"""The leased worker, one test per rule of seed 004_85033eb8fc772f12.txt.

Memory store, both anyio backends, a FakeClock for every lease and retry
decision (nothing waits 90 s), and the deterministic ReferenceModelClient
with scripted steps for failures, hangs and work done by a second worker
while the first one's model call is still out.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import anyio
import pytest

from runtime.adapters.memory.jobs_store import MemoryJobStore
from runtime.adapters.reference_model import ReferenceModelClient
from runtime.jobs import (
    DEFAULT_POLICY,
    AttemptClosed,
    AttemptFailure,
    CallBudgetExhausted,
    ContextTooLarge,
    EventKind,
    EvidenceRecord,
    JobConflict,
    JobPolicy,
    JobState,
    LeasedJob,
    LeaseExpired,
    ModelReply,
    ModelRequest,
    ModelVersionMismatch,
    NotLeaseOwner,
    NotReprocessable,
    Refusal,
    RetryableModelError,
    StagedResult,
    StaleFence,
    UnknownJob,
    Usage,
    WorkerContext,
    WorkspaceNotAuthorised,
    new_job,
    run_once,
)
from runtime.jobs.worker import PAYLOAD_TOO_LARGE
from tests.bounds import HANG_S
from tests.unit.fakes import FakeClock, FakeEntropy

pytestmark = pytest.mark.anyio

WS = "acme"
MODEL = "reference-1"


class World:
    def __init__(self, policy: JobPolicy = DEFAULT_POLICY, **model: object) -> None:
        self.clock = FakeClock()
        self.store = MemoryJobStore()
        self.model = ReferenceModelClient(**model)  # type: ignore[arg-type]
        self.policy = policy
        self._n = 0

    def ctx(self, worker: str = "w1", workspace: str = WS, **kw: object) -> WorkerContext:
        fields: dict[str, object] = {
            "store": self.store,
            "model": self.model,
            "clock": self.clock,
            "workspace": workspace,
            "worker_id": worker,
            "scopes": (WS,),
            "policy": self.policy,
            "entropy": FakeEntropy(),
        }
        fields.update(kw)
        return WorkerContext(**fields)  # type: ignore[arg-type]

    async def receive(
        self,
        payload: str = "name: Ada\nborn: 1815",
        workspace: str = WS,
        model: str = MODEL,
        policy: JobPolicy = DEFAULT_POLICY,
    ) -> LeasedJob:
        self._n += 1
        now = self.clock.now()
        evidence = EvidenceRecord(
            id=UUID(int=1000 + self._n), workspace=workspace, payload=payload, received_at=now
        )
        job = new_job(UUID(int=self._n), evidence, model, now, policy)
        self.clock.advance(1)
        return await self.store.receive(evidence, job)

    async def job(self, job_id: UUID) -> LeasedJob:
        job = await self.store.get(job_id)
        assert job is not None
        return job

    async def kinds(self, job_id: UUID) -> list[str]:
        return [e.kind.value for e in await self.store.attempts(job_id)]


def staged(bundle: dict[str, object] | None = None, usage: Usage | None = None) -> StagedResult:
    return StagedResult(bundle=bundle or {"assertions": [], "needs": None}, usage=usage)


USAGE = Usage(input_tokens=10, output_tokens=2)


# -- durable states ---------------------------------------------------------------


async def test_default_policy_is_the_seeds() -> None:
    p = DEFAULT_POLICY
    assert (p.lease_s, p.renew_every_s, p.max_model_calls, p.max_attempts) == (90, 20, 2, 3)
    assert p.model_deadline_s == 45


async def test_receive_preserves_evidence_and_job_in_one_step_and_repeats_idempotently() -> None:
    w = World()
    job = await w.receive()
    assert job.state is JobState.QUEUED
    evidence = await w.store.evidence(job.evidence_id)
    assert evidence is not None and evidence.payload.startswith("name: Ada")
    again = await w.store.receive(evidence, job)
    assert again == job and len(w.store.job_table) == 1


async def test_receive_reusing_ids_for_other_content_is_refused_and_writes_nothing() -> None:
    w = World()
    job = await w.receive()
    evidence = await w.store.evidence(job.evidence_id)
    assert evidence is not None
    changed = evidence.model_copy(update={"payload": "other", "digest": ""})
    changed = EvidenceRecord.model_validate(changed.model_dump())
    with pytest.raises(JobConflict):
        await w.store.receive(changed, job)
    other = job.model_copy(update={"id": UUID(int=77), "workspace": "elsewhere"})
    with pytest.raises(JobConflict):
        await w.store.receive(evidence, other)
    assert list(w.store.job_table) == [job.id]
    assert w.store.evidence_table[evidence.id] == evidence


async def test_run_once_returns_none_when_nothing_is_eligible() -> None:
    w = World()
    assert await run_once(w.ctx()) is None


async def test_run_once_publishes_and_returns_state_and_bundle() -> None:
    w = World()
    job = await w.receive()
    done = await run_once(w.ctx())
    assert done is not None and done.id == job.id
    assert done.state is JobState.PUBLISHED
    assert done.bundle == {
        "assertions": [{"subject": "name", "value": "Ada"}, {"subject": "born", "value": "1815"}],
        "needs": None,
    }
    assert done.lease_owner is None and done.settled_fence == 1
    (interp,) = await w.store.interpretations(job.id)
    assert interp.accepted and interp.number == 1


async def test_a_successful_inference_may_wait_on_a_named_dependency_not_publish() -> None:
    w = World()
    for needs, state in [
        ("ontology", JobState.WAITING_ONTOLOGY),
        ("identity", JobState.WAITING_IDENTITY),
        ("review", JobState.WAITING_REVIEW),
    ]:
        await w.receive(f"name: Ada\nneeds: {needs}")
        done = await run_once(w.ctx())
        assert done is not None and done.state is state
        assert done.bundle is not None and done.bundle["needs"] == needs
        (interp,) = await w.store.interpretations(done.id)
        assert not interp.accepted  # not a completed fact


async def test_waiting_and_terminal_jobs_are_never_claimed() -> None:
    w = World()
    job = await w.receive("needs: review")
    assert (await run_once(w.ctx())).state is JobState.WAITING_REVIEW  # type: ignore[union-attr]
    w.clock.advance(1000)
    assert await run_once(w.ctx()) is None
    assert (await w.job(job.id)).fence == 1


async def test_claim_takes_at_most_one_eligible_job_oldest_first() -> None:
    w = World()
    first, second = await w.receive(), await w.receive()
    claimed = await w.store.claim_one(WS, "w1", w.clock.now(), 90)
    assert claimed is not None and claimed.id == first.id
    assert (await w.job(second.id)).lease_owner is None
    other = await w.store.claim_one(WS, "w2", w.clock.now(), 90)
    assert other is not None and other.id == second.id
    assert await w.store.claim_one(WS, "w3", w.clock.now(), 90) is None


async def test_concurrent_claimers_never_share_a_job() -> None:
    w = World()
    for _ in range(5):
        await w.receive()
    got: list[UUID] = []

    async def claim(worker: str) -> None:
        job = await w.store.claim_one(WS, worker, w.clock.now(), 90)
        if job is not None:
            got.append(job.id)

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(claim, f"w{i}")
    assert len(got) == 5 and len(set(got)) == 5


async def test_retry_scheduled_job_is_eligible_only_when_due() -> None:
    w = World()
    job = await w.receive()
    w.model.script.append(RetryableModelError("overloaded"))
    after = await run_once(w.ctx())
    assert after is not None and after.state is JobState.RETRY_SCHEDULED
    assert after.retry_at == w.clock.now() + timedelta(seconds=DEFAULT_POLICY.retry_base_s)
    assert await run_once(w.ctx()) is None  # not yet due
    w.clock.advance(DEFAULT_POLICY.retry_base_s)
    again = await run_once(w.ctx())
    assert again is not None and again.id == job.id and again.state is JobState.PUBLISHED


# -- leases and fences ---------------------------------------------------------------


async def test_a_claim_leases_for_90_s_and_increments_the_fence() -> None:
    w = World()
    job = await w.receive()
    now = w.clock.now()
    claimed = await w.store.claim_one(WS, "w1", now, DEFAULT_POLICY.lease_s)
    assert claimed is not None
    assert (claimed.fence, claimed.lease_owner, claimed.attempts_used) == (1, "w1", 1)
    assert claimed.lease_expires_at == now + timedelta(seconds=90)
    w.clock.advance(90)
    again = await w.store.claim_one(WS, "w2", w.clock.now(), 90)
    assert again is not None and again.id == job.id
    assert (again.fence, again.lease_owner, again.attempts_used) == (2, "w2", 2)


async def test_a_live_lease_is_not_reclaimed() -> None:
    w = World()
    await w.receive()
    assert await w.store.claim_one(WS, "w1", w.clock.now(), 90) is not None
    w.clock.advance(89.9)
    assert await w.store.claim_one(WS, "w2", w.clock.now(), 90) is None


async def test_renewal_happens_at_most_every_20_s() -> None:
    w = World()
    job = await w.receive()
    claimed = await w.store.claim_one(WS, "w1", w.clock.now(), 90)
    assert claimed is not None
    w.clock.advance(19)
    early = await w.store.renew(job.id, 1, "w1", w.clock.now())
    assert early == claimed  # unchanged: renewed too soon
    w.clock.advance(1)
    renewed = await w.store.renew(job.id, 1, "w1", w.clock.now())
    assert renewed.lease_expires_at == w.clock.now() + timedelta(seconds=90)
    assert renewed.lease_renewed_at == w.clock.now()


async def test_renewing_an_expired_or_foreign_lease_is_refused() -> None:
    w = World()
    job = await w.receive()
    await w.store.claim_one(WS, "w1", w.clock.now(), 90)
    with pytest.raises(NotLeaseOwner):
        await w.store.renew(job.id, 1, "intruder", w.clock.now())
    w.clock.advance(90)
    with pytest.raises(LeaseExpired):
        await w.store.renew(job.id, 1, "w1", w.clock.now())


async def test_the_worker_renews_its_lease_during_a_long_model_call() -> None:
    w = World(policy=JobPolicy(renew_every_s=0.01))
    job = await w.receive()

    async def slow(request: ModelRequest) -> ModelReply:
        w.clock.advance(80)
        await anyio.sleep(0.2)  # renewals happen; the store takes the first after 20 s
        w.clock.advance(80)  # 160 s after the claim: only a renewed lease is still live
        return w.model.reply(request)

    w.model.script.append(slow)
    done = await run_once(w.ctx())
    assert done is not None and done.state is JobState.PUBLISHED
    assert done.id == job.id


async def test_an_expired_lease_is_reclaimed_by_another_worker_and_logged() -> None:
    w = World()
    job = await w.receive()
    await w.store.claim_one(WS, "w1", w.clock.now(), 90)
    await w.store.reserve_model_call(job.id, 1, "w1", w.clock.now())
    w.clock.advance(91)  # w1 died mid-call
    done = await run_once(w.ctx("w2"))
    assert done is not None and done.state is JobState.PUBLISHED and done.fence == 2
    events = await w.store.attempts(job.id)
    assert [(e.kind, e.fence, e.worker) for e in events] == [
        (EventKind.STARTED, 1, "w1"),
        (EventKind.EXPIRED_LEASE, 1, "w1"),
        (EventKind.STARTED, 2, "w2"),
        (EventKind.COMPLETED, 2, "w2"),
    ]


async def test_a_late_result_from_the_old_fence_never_overwrites_and_its_usage_is_kept() -> None:
    w = World()
    job = await w.receive("name: Ada")
    late_usage = Usage(input_tokens=9, output_tokens=1)

    async def stall_then_answer(request: ModelRequest) -> ModelReply:
        w.clock.advance(120)  # w1's lease lapses; w2 takes over and finishes
        newer = await run_once(w.ctx("w2"))
        assert newer is not None and newer.fence == 2 and newer.state is JobState.PUBLISHED
        return ModelReply(
            model_version=MODEL,
            output={"assertions": [{"subject": "stale", "value": "x"}], "needs": None},
            usage=late_usage,
        )

    w.model.script.append(stall_then_answer)
    result = await run_once(w.ctx("w1"))
    assert result is not None and result.fence == 2
    assert result.bundle == {"assertions": [{"subject": "name", "value": "Ada"}], "needs": None}
    assert [i.fence for i in await w.store.interpretations(job.id)] == [2]
    late = [e for e in await w.store.attempts(job.id) if e.refused is not None]
    assert [(e.kind, e.fence, e.refused, e.usage) for e in late] == [
        (EventKind.COMPLETED, 1, Refusal.STALE_FENCE, late_usage)
    ]


async def test_staging_checks_owner_fence_lease_and_model_version() -> None:
    w = World()
    job = await w.receive()
    await w.store.claim_one(WS, "w1", w.clock.now(), 90)
    before = await w.job(job.id)
    with pytest.raises(NotLeaseOwner):
        await w.store.stage(job.id, 1, "w9", MODEL, staged(), w.clock.now())
    with pytest.raises(StaleFence):
        await w.store.stage(job.id, 0, "w1", MODEL, staged(), w.clock.now())
    with pytest.raises(ModelVersionMismatch):
        await w.store.stage(job.id, 1, "w1", "other-model", staged(), w.clock.now())
    w.clock.advance(90)
    with pytest.raises(LeaseExpired):
        await w.store.stage(job.id, 1, "w1", MODEL, staged(), w.clock.now())
    assert await w.job(job.id) == before
    assert await w.store.interpretations(job.id) == []
    refused = [e.refused for e in await w.store.attempts(job.id)]
    assert refused == [
        Refusal.NOT_OWNER,
        Refusal.STALE_FENCE,
        Refusal.MODEL_VERSION,
        Refusal.LEASE_EXPIRED,
    ]


async def test_a_repeated_stage_after_an_ambiguous_commit_returns_the_job() -> None:
    w = World()
    job = await w.receive()
    await w.store.claim_one(WS, "w1", w.clock.now(), 90)
    first = await w.store.stage(job.id, 1, "w1", MODEL, staged(), w.clock.now())
    again = await w.store.stage(job.id, 1, "w1", MODEL, staged(), w.clock.now())
    assert again == first and len(await w.store.interpretations(job.id)) == 1
    with pytest.raises(AttemptClosed):
        await w.store.fail(job.id, 1, "w1", AttemptFailure(reason="late"), w.clock.now())


async def test_a_worker_of_another_model_version_hands_the_attempt_back_without_a_call() -> None:
    w = World()
    job = await w.receive(model="other-model")
    after = await run_once(w.ctx())
    assert after is not None and after.state is JobState.RETRY_SCHEDULED
    assert after.model_calls_reserved == 0 and w.model.calls == []
    assert (await w.job(job.id)).attempts_used == 1


async def test_a_reply_from_another_model_version_is_not_staged() -> None:
    w = World()
    job = await w.receive()
    w.model.script.append(
        ModelReply(model_version="drifted", output={"assertions": []}, usage=USAGE)
    )
    after = await run_once(w.ctx())
    assert after is not None and after.state is JobState.RETRY_SCHEDULED
    assert await w.store.interpretations(job.id) == []
    refused = [e for e in await w.store.attempts(job.id) if e.refused]
    assert refused[0].refused is Refusal.MODEL_VERSION and refused[0].usage == USAGE


async def test_losing_the_lease_during_the_call_cancels_it_and_writes_nothing() -> None:
    w = World(policy=JobPolicy(renew_every_s=0.01))
    job = await w.receive()
    cancelled = anyio.Event()

    async def hang_while_taken_over(request: ModelRequest) -> ModelReply:
        w.clock.advance(100)
        taken = await w.store.claim_one(WS, "w2", w.clock.now(), 90)
        assert taken is not None and taken.fence == 2
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    w.model.script.append(hang_while_taken_over)
    with anyio.fail_after(HANG_S):
        result = await run_once(w.ctx("w1"))
    assert cancelled.is_set()
    assert result is not None and (result.fence, result.lease_owner) == (2, "w2")
    assert result.state is JobState.QUEUED and result.error is None
    assert job.id == result.id


# -- bounded retries and budgets ----------------------------------------------------


async def test_model_calls_are_reserved_before_the_network_call() -> None:
    w = World()
    job = await w.receive()
    seen: list[list[str]] = []

    async def look(request: ModelRequest) -> None:
        seen.append(await w.kinds(job.id))
        assert request.call == 1

    w.model.script.append(look)  # type: ignore[arg-type]
    await run_once(w.ctx())
    assert seen == [["started"]]
    assert (await w.job(job.id)).model_calls_reserved == 1


async def test_retryable_failures_schedule_bounded_retries_then_exhaust() -> None:
    w = World()
    job = await w.receive()
    w.model.script += [
        RetryableModelError("429", usage=USAGE),
        RetryableModelError("503"),
    ]
    first = await run_once(w.ctx())
    assert first is not None and first.state is JobState.RETRY_SCHEDULED
    w.clock.advance(DEFAULT_POLICY.retry_max_s)
    second = await run_once(w.ctx())
    assert second is not None and second.state is JobState.EXHAUSTED  # two calls: the budget
    assert second.model_calls_reserved == 2 and second.attempts_used == 2
    assert second.error is not None and "model call budget spent" in second.error
    w.clock.advance(1000)
    assert await run_once(w.ctx()) is None
    failed = [e for e in await w.store.attempts(job.id) if e.kind is EventKind.FAILED]
    assert [e.usage for e in failed] == [USAGE, None]


async def test_the_retry_delay_grows_and_is_capped() -> None:
    p = JobPolicy(retry_base_s=5, retry_max_s=12)
    assert [p.retry_delay(n) for n in (1, 2, 3, 4)] == [5, 10, 12, 12]


async def test_at_most_three_worker_attempts_across_crashes() -> None:
    w = World()
    job = await w.receive()
    for attempt in (1, 2, 3):  # each worker dies before reserving a call
        claimed = await w.store.claim_one(WS, f"w{attempt}", w.clock.now(), 90)
        assert claimed is not None and claimed.attempts_used == attempt
        w.clock.advance(90)
    assert await w.store.claim_one(WS, "w4", w.clock.now(), 90) is None
    after = await w.job(job.id)
    assert after.state is JobState.EXHAUSTED and after.attempts_used == 3
    assert (await w.kinds(job.id)).count("expired_lease") == 3


async def test_a_killed_process_still_consumes_its_call_and_leaves_usage_unknown() -> None:
    w = World()
    job = await w.receive()
    for worker in ("w1", "w2"):  # each reserves a call and dies before the reply
        claimed = await w.store.claim_one(WS, worker, w.clock.now(), 90)
        assert claimed is not None
        await w.store.reserve_model_call(job.id, claimed.fence, worker, w.clock.now())
        w.clock.advance(90)
    assert await run_once(w.ctx("w3")) is None  # no call left: exhausted, not claimed
    after = await w.job(job.id)
    assert after.state is JobState.EXHAUSTED and after.model_calls_reserved == 2
    started = [e for e in await w.store.attempts(job.id) if e.kind is EventKind.STARTED]
    assert [e.usage for e in started] == [None, None]  # unknown, not zero


async def test_reserving_beyond_the_call_budget_is_refused() -> None:
    w = World()
    job = await w.receive()
    await w.store.claim_one(WS, "w1", w.clock.now(), 90)
    await w.store.reserve_model_call(job.id, 1, "w1", w.clock.now())
    await w.store.reserve_model_call(job.id, 1, "w1", w.clock.now())
    with pytest.raises(CallBudgetExhausted):
        await w.store.reserve_model_call(job.id, 1, "w1", w.clock.now())
    assert (await w.job(job.id)).model_calls_reserved == 2


async def test_a_hung_model_call_meets_the_deadline_and_is_retried() -> None:
    w = World(policy=JobPolicy(model_deadline_s=0.05))
    job = await w.receive()

    async def hang(request: ModelRequest) -> ModelReply:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    w.model.script.append(hang)
    with anyio.fail_after(HANG_S):
        after = await run_once(w.ctx())
    assert after is not None and after.state is JobState.RETRY_SCHEDULED
    assert after.error == "model deadline of 0.05 s"
    failed = (await w.store.attempts(job.id))[-1]
    assert failed.kind is EventKind.FAILED and failed.usage is None


async def test_an_unexpected_client_error_is_retryable_with_unknown_usage() -> None:
    w = World()
    job = await w.receive()
    w.model.script.append(ConnectionResetError("peer reset"))
    after = await run_once(w.ctx())
    assert after is not None and after.state is JobState.RETRY_SCHEDULED
    assert after.error == "ConnectionResetError: peer reset"
    assert (await w.store.attempts(job.id))[-1].usage is None


async def test_invalid_output_fails_and_stays_inspectable() -> None:
    w = World()
    job = await w.receive()
    w.model.script.append(
        ModelReply(model_version=MODEL, output={"assertions": "oops"}, usage=USAGE)
    )
    after = await run_once(w.ctx())
    assert after is not None and after.state is JobState.FAILED
    assert after.error is not None and after.error.startswith("invalid model output")
    assert after.diagnostic == {"output": {"assertions": "oops"}}
    assert (await w.store.attempts(job.id))[-1].usage == USAGE
    assert await w.store.evidence(job.evidence_id) is not None


async def test_a_payload_beyond_the_model_context_fails_without_losing_the_evidence() -> None:
    w = World(context_limit=16)
    job = await w.receive("x" * 17)
    after = await run_once(w.ctx())
    assert after is not None and after.state is JobState.FAILED
    assert after.error == PAYLOAD_TOO_LARGE
    assert after.diagnostic is not None and after.diagnostic["payload_chars"] == 17
    assert after.model_calls_reserved == 0 and w.model.calls == []
    evidence = await w.store.evidence(job.evidence_id)
    assert evidence is not None and evidence.payload == "x" * 17


async def test_a_model_reporting_context_overflow_also_fails_processing() -> None:
    w = World()
    job = await w.receive()
    w.model.context_limit = 10_000
    w.model.script.append(ContextTooLarge("tokens beyond window"))
    after = await run_once(w.ctx())
    assert after is not None and after.state is JobState.FAILED
    assert after.error is not None and after.error.startswith(PAYLOAD_TOO_LARGE)
    assert await w.store.evidence(job.evidence_id) is not None


# -- reprocess and accounting ---------------------------------------------------


async def test_reprocess_creates_another_interpretation_without_retracting_facts() -> None:
    w = World()
    job = await w.receive()
    first = await run_once(w.ctx())
    assert first is not None and first.state is JobState.PUBLISHED
    again = await w.store.reprocess(job.id, w.clock.now())
    assert (again.state, again.interpretation, again.attempts_used) == (JobState.QUEUED, 2, 0)
    assert again.bundle == first.bundle  # the accepted reading is still what is published
    w.model.script.append(
        ModelReply(
            model_version=MODEL,
            output={"assertions": [{"subject": "name", "value": "Ada L."}], "needs": "review"},
        )
    )
    second = await run_once(w.ctx())
    assert second is not None and second.state is JobState.WAITING_REVIEW
    one, two = await w.store.interpretations(job.id)
    assert (one.number, one.accepted, one.bundle) == (1, True, first.bundle)
    assert (two.number, two.accepted) == (2, False)


async def test_reprocess_refuses_work_still_pending() -> None:
    w = World()
    job = await w.receive()
    with pytest.raises(NotReprocessable):
        await w.store.reprocess(job.id, w.clock.now())
    assert (await w.job(job.id)).interpretation == 1


async def test_attempts_lists_started_completed_failed_and_expired_lease_events() -> None:
    w = World()
    job = await w.receive(policy=JobPolicy(max_model_calls=3))
    claimed = await w.store.claim_one(WS, "w1", w.clock.now(), 90)
    assert claimed is not None
    await w.store.reserve_model_call(job.id, 1, "w1", w.clock.now())
    w.clock.advance(90)
    w.model.script.append(RetryableModelError("503", usage=USAGE))
    await run_once(w.ctx("w2"))
    w.clock.advance(60)
    done = await run_once(w.ctx("w3"))
    assert done is not None and done.state is JobState.PUBLISHED
    events = await w.store.attempts(job.id)
    assert [(e.index, e.kind.value, e.fence, e.worker) for e in events] == [
        (0, "started", 1, "w1"),
        (1, "expired_lease", 1, "w1"),
        (2, "started", 2, "w2"),
        (3, "failed", 2, "w2"),
        (4, "started", 3, "w3"),
        (5, "completed", 3, "w3"),
    ]
    assert [e.call for e in events if e.kind is EventKind.STARTED] == [1, 2, 3]
    assert events[3].usage == USAGE and events[0].usage is None
    assert events[5].usage is not None


async def test_unknown_usage_is_recorded_as_none_never_zero() -> None:
    w = World()
    job = await w.receive()
    w.model.script.append(ModelReply(model_version=MODEL, output={"assertions": []}))
    done = await run_once(w.ctx())
    assert done is not None and done.state is JobState.PUBLISHED
    (interp,) = await w.store.interpretations(job.id)
    assert interp.usage is None
    assert all(e.usage is None for e in await w.store.attempts(job.id))


# -- bad input -------------------------------------------------------------------


async def test_a_claim_outside_the_authorised_workspace_is_refused() -> None:
    w = World()
    other = await w.receive(workspace="other")
    with pytest.raises(WorkspaceNotAuthorised):
        await run_once(w.ctx(workspace="other"))
    with pytest.raises(WorkspaceNotAuthorised):
        await run_once(w.ctx(workspace=""))
    assert (await w.job(other.id)).fence == 0
    assert await run_once(w.ctx()) is None  # an authorised worker never sees other workspaces


async def test_a_stale_fence_is_refused_for_every_fenced_write() -> None:
    w = World()
    job = await w.receive()
    await w.store.claim_one(WS, "w1", w.clock.now(), 90)
    w.clock.advance(90)
    await w.store.claim_one(WS, "w2", w.clock.now(), 90)
    before = await w.job(job.id)
    now, failure = w.clock.now(), AttemptFailure(reason="x")
    with pytest.raises(StaleFence):
        await w.store.renew(job.id, 1, "w1", now)
    with pytest.raises(StaleFence):
        await w.store.reserve_model_call(job.id, 1, "w1", now)
    with pytest.raises(StaleFence):
        await w.store.schedule_retry(job.id, 1, "w1", now, failure, now)
    with pytest.raises(StaleFence):
        await w.store.fail(job.id, 1, "w1", failure, now)
    with pytest.raises(StaleFence):
        await w.store.exhaust(job.id, 1, "w1", failure, now)
    with pytest.raises(StaleFence):
        await w.store.stage(job.id, 1, "w1", MODEL, staged(), now)
    assert await w.job(job.id) == before


async def test_a_result_for_an_unknown_job_is_refused_and_writes_nothing() -> None:
    w = World()
    ghost = UUID(int=999)
    now = w.clock.now()
    with pytest.raises(UnknownJob):
        await w.store.stage(ghost, 1, "w1", MODEL, staged(usage=USAGE), now)
    with pytest.raises(UnknownJob):
        await w.store.renew(ghost, 1, "w1", now)
    with pytest.raises(UnknownJob):
        await w.store.reprocess(ghost, now)
    assert w.store.event_log == {} and w.store.interpretation_table == {}
