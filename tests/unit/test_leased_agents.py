"""The leased-job AgentRuntime (issue 8 item 3), in one process over memory.

Seed 000_81a5c720b14d934a.txt ("Delegated AgentJob labor") over seed
004_85033eb8fc772f12.txt: the `delegate` Pattern submits its AgentJob as a
leased job, a worker (`run_once`, standing in for `vessel jobs work`)
executes it, `refresh_delegate` re-admits the parked Run from the job's
terminal state, and cancellation is acknowledged only once no lease on the
job is live. A FakeClock drives every lease, so nothing waits 90 s.
"""

from __future__ import annotations

from uuid import UUID

import anyio
import pytest

from runtime.adapters.leased_agents import (
    MEDIA_TYPE,
    WITHDRAWN,
    LeasedAgentRuntime,
    evidence_id,
    report_of,
    request_text,
)
from runtime.adapters.memory.jobs_store import MemoryJobStore
from runtime.adapters.reference_model import ReferenceModelClient
from runtime.cancel import Canceller
from runtime.jobs import (
    EventKind,
    JobConflict,
    JobPolicy,
    JobState,
    LeasedJob,
    ModelReply,
    ModelRequest,
    WorkerContext,
    run_once,
)
from runtime.models import AgentJobStatus, RunStatus
from runtime.stasis.delegate import refresh_delegate
from runtime.worker import HopOutcome
from tests.unit.fakes import FakeClock, World
from tests.unit.waitkit import admit, hop, run_of, tables, wait_world

pytestmark = pytest.mark.anyio

WS = "delegates"


class Delegation:
    """A Vessel world whose agent runtime is leased jobs, and a worker beside it."""

    def __init__(self, policy: JobPolicy | None = None) -> None:
        self.policy = policy or JobPolicy()
        self.store = MemoryJobStore()
        self.agents = LeasedAgentRuntime(self.store, FakeClock(), WS, policy=self.policy)
        self.w: World = wait_world(agents=self.agents)
        self.agents.clock = self.w.clock
        self.model = ReferenceModelClient()

    def worker(self, name: str = "w1") -> WorkerContext:
        return WorkerContext(store=self.store, model=self.model, clock=self.w.clock,
                             workspace=WS, worker_id=name, scopes=(WS,), policy=self.policy)

    async def parked(self, task: str = "translate") -> tuple[UUID, UUID]:
        run_id = await admit(self.w, "delegate", task=task)
        assert await hop(self.w, run_id) is HopOutcome.PARKED
        job_id = run_of(self.w, run_id).agent_job_id
        assert job_id is not None
        return run_id, job_id

    async def leased(self, job_id: UUID) -> LeasedJob:
        job = await self.store.get(job_id)
        assert job is not None
        return job


async def test_a_delegated_job_is_received_as_a_queued_leased_job_with_its_evidence() -> None:
    d = Delegation()
    run_id, job_id = await d.parked()

    job = await d.leased(job_id)
    assert job.state is JobState.QUEUED and job.fence == 0 and job.workspace == WS
    assert job.model_version == "reference-1" and job.evidence_id == evidence_id(job_id)
    evidence = await d.store.evidence(job.evidence_id)
    assert evidence is not None and evidence.media_type == MEDIA_TYPE
    assert evidence.payload == "task: translate"
    assert evidence.received_at == tables(d.w).agent_job_table[job_id].created_at
    assert run_of(d.w, run_id).status is RunStatus.AWAITING_DELEGATE


async def test_the_worker_executes_it_and_the_relay_readmits_the_run_to_done() -> None:
    d = Delegation()
    run_id, job_id = await d.parked()
    assert await refresh_delegate(d.w.engine, run_of(d.w, run_id)) is None  # queued: RUNNING

    done = await run_once(d.worker())
    assert done is not None and done.id == job_id and done.state is JobState.PUBLISHED

    delivery = await refresh_delegate(d.w.engine, run_of(d.w, run_id))
    assert delivery is not None and delivery.seq == 1
    assert tables(d.w).agent_job_table[job_id].status is AgentJobStatus.SUCCEEDED
    assert await hop(d.w, run_id) is HopOutcome.SETTLED
    run = run_of(d.w, run_id)
    assert run.status is RunStatus.DONE
    assert run.result == {
        "job": str(job_id),
        "answer": {
            "assertions": [{"subject": "task", "value": "translate"}],
            "needs": None,
            "leased_job": str(job_id),
            "interpretation": 1,
            "model_version": "reference-1",
        },
    }
    kinds = [e.kind for e in await d.store.attempts(job_id)]
    assert kinds == [EventKind.STARTED, EventKind.COMPLETED]


async def test_submit_adopts_a_known_job_and_never_starts_it_twice() -> None:
    d = Delegation()
    _run_id, job_id = await d.parked()
    agent_job = tables(d.w).agent_job_table[job_id]
    claimed = await d.store.claim_one(WS, "w1", d.w.clock.now(), 90)
    assert claimed is not None

    restarted = LeasedAgentRuntime(d.store, d.w.clock, WS)  # a new Vessel boot
    await restarted.submit(agent_job)
    await restarted.submit(agent_job)

    assert await d.leased(job_id) == claimed  # fence, lease and budgets untouched
    assert list(d.store.job_table) == [job_id] and len(d.store.evidence_table) == 1


async def test_an_unknown_job_is_submitted_again_by_the_relay_under_its_identity() -> None:
    d = Delegation()
    run_id, job_id = await d.parked()
    d.store.job_table.clear()  # as if the receipt had never committed
    d.store.evidence_table.clear()

    assert await d.agents.lookup(job_id) is None
    assert await refresh_delegate(d.w.engine, run_of(d.w, run_id)) is None
    job = await d.leased(job_id)
    assert job.state is JobState.QUEUED and job.evidence_id == evidence_id(job_id)


async def test_the_same_id_for_other_work_is_refused() -> None:
    d = Delegation()
    _, job_id = await d.parked()
    agent_job = tables(d.w).agent_job_table[job_id]
    elsewhere = LeasedAgentRuntime(d.store, d.w.clock, "another-workspace")
    with pytest.raises(JobConflict):
        await elsewhere.submit(agent_job)
    changed = agent_job.model_copy(update={"id": UUID(int=77), "request": {"task": "other"}})
    await d.agents.submit(changed)  # a new identity is new work
    with pytest.raises(JobConflict):
        await d.store.receive(*d.agents.receipt(changed.model_copy(update={"request": {}})))


@pytest.mark.parametrize(
    ("state", "status"),
    [
        (JobState.QUEUED, AgentJobStatus.RUNNING),
        (JobState.RETRY_SCHEDULED, AgentJobStatus.RUNNING),
        (JobState.WAITING_ONTOLOGY, AgentJobStatus.RUNNING),
        (JobState.WAITING_IDENTITY, AgentJobStatus.RUNNING),
        (JobState.WAITING_REVIEW, AgentJobStatus.RUNNING),
        (JobState.PUBLISHED, AgentJobStatus.SUCCEEDED),
        (JobState.FAILED, AgentJobStatus.FAILED),
        (JobState.EXHAUSTED, AgentJobStatus.FAILED),
    ],
)
async def test_lookup_maps_every_leased_state(state: JobState, status: AgentJobStatus) -> None:
    d = Delegation()
    _, job_id = await d.parked()
    job = (await d.leased(job_id)).model_copy(
        update={"state": state, "bundle": {"assertions": [], "needs": None}, "error": "why"}
    )
    report = report_of(job)
    assert report.status is status
    if status is AgentJobStatus.SUCCEEDED:
        assert isinstance(report.result, dict) and report.result["assertions"] == []
    elif status is AgentJobStatus.FAILED:
        assert report.result == {"state": state.value, "error": "why", "leased_job": str(job_id)}
    else:
        assert report.result is None


async def test_an_exhausted_job_fails_the_run_through_the_delegate_pattern() -> None:
    d = Delegation(JobPolicy(max_model_calls=1))
    run_id, job_id = await d.parked()
    d.model.script.append(ConnectionResetError("reply lost"))
    retried = await run_once(d.worker())
    assert retried is not None and retried.state is JobState.EXHAUSTED  # no call left

    assert await refresh_delegate(d.w.engine, run_of(d.w, run_id)) is not None
    assert tables(d.w).agent_job_table[job_id].status is AgentJobStatus.FAILED
    await hop(d.w, run_id)
    run = run_of(d.w, run_id)
    assert run.status is RunStatus.FAILED and "ended FAILED" in (run.error or "")
    (failed,) = [e for e in await d.store.attempts(job_id) if e.kind is EventKind.FAILED]
    assert failed.usage is None  # never returned: unknown, not zero


async def test_cancel_of_a_queued_job_withdraws_it_then_records_cancelled() -> None:
    d = Delegation()
    run_id, job_id = await d.parked()

    run = await Canceller(d.w.deps).cancel(run_id)

    assert run.status is RunStatus.CANCELLED
    assert tables(d.w).agent_job_table[job_id].status is AgentJobStatus.CANCELLED
    job = await d.leased(job_id)
    assert job.state is JobState.FAILED and job.error == WITHDRAWN
    assert await run_once(d.worker()) is None  # nothing left to claim
    assert await d.store.evidence(job.evidence_id) is not None


async def test_cancel_under_a_live_lease_stays_cancelling_until_the_lease_lapses() -> None:
    d = Delegation()
    run_id, job_id = await d.parked()
    calling, release = anyio.Event(), anyio.Event()

    async def held(request: ModelRequest) -> ModelReply | None:
        calling.set()
        await release.wait()
        return None

    d.model.script.append(held)
    canceller = Canceller(d.w.deps)
    outcome: list[LeasedJob | None] = []
    async with anyio.create_task_group() as tg:

        async def work() -> None:
            outcome.append(await run_once(d.worker()))

        tg.start_soon(work)
        await calling.wait()

        first = await canceller.cancel(run_id)  # the worker holds a live lease
        assert first.status is RunStatus.CANCELLING
        assert tables(d.w).agent_job_table[job_id].status is AgentJobStatus.SUBMITTED
        assert (await d.leased(job_id)).state is JobState.QUEUED

        d.w.clock.advance(91)  # the lease lapses while the call is still out
        second = await canceller.cancel(run_id)
        assert second.status is RunStatus.CANCELLED
        release.set()

    late = outcome[0]
    assert late is not None and late.state is JobState.FAILED and late.error == WITHDRAWN
    assert await d.store.interpretations(job_id) == []  # the late result was refused
    kinds = [(e.kind, e.refused) for e in await d.store.attempts(job_id)]
    assert (EventKind.EXPIRED_LEASE, None) in kinds
    assert kinds[-1][0] is EventKind.COMPLETED and kinds[-1][1] is not None  # usage kept
    assert tables(d.w).agent_job_table[job_id].status is AgentJobStatus.CANCELLED


async def test_cancel_of_a_job_that_already_published_is_acknowledged_unchanged() -> None:
    d = Delegation()
    _run_id, job_id = await d.parked()
    published = await run_once(d.worker())
    assert published is not None

    assert await d.agents.cancel(job_id) is True
    assert await d.leased(job_id) == published


async def test_cancel_of_a_job_never_received_is_acknowledged_and_it_never_starts() -> None:
    d = Delegation()
    _run_id, job_id = await d.parked()
    agent_job = tables(d.w).agent_job_table[job_id]
    d.store.job_table.clear()  # as if the receipt had never committed
    d.store.evidence_table.clear()

    assert await d.agents.cancel(job_id) is True
    await d.agents.submit(agent_job)  # a relay's adoption that lost the race

    assert await d.store.get(job_id) is None and d.store.evidence_table == {}
    assert await run_once(d.worker()) is None


def test_the_request_text_is_a_pure_function_of_the_request() -> None:
    text = request_text({"b": 2, "a": "x", "c": "two\nlines", "d:e": [1]})
    assert text == 'a: x\nb: 2\nc: "two\\nlines"\n"d:e": [1]'
    assert request_text({}) == ""
