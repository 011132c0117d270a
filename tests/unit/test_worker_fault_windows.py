"""The two crash windows of the standalone workers (DESIGN section 5), one
named test per point: a crash (or a late result) exactly there leaves the
state the seeds prescribe.

- `job.inference_returned` (seed 004_85033eb8fc772f12.txt): the model call
  returned, nothing is staged. The late result from the old fence never
  lands; the reserved call budget stays consumed.
- `service.submitted_before_ack` (seed 000_81a5c720b14d934a.txt, "Service
  job attempts"): the provider acknowledged, the id is not persisted. The
  attempt stays SUBMITTING (or INDETERMINATE); reconciliation adopts the job
  by lookup; nothing is resubmitted blindly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

import pytest

from runtime import faults
from runtime.adapters.memory.jobs_store import MemoryJobStore
from runtime.adapters.memory.service_store import MemoryServiceStore
from runtime.adapters.reference_model import ReferenceModelClient
from runtime.adapters.reference_service import ReferenceServiceDriver
from runtime.errors import ProcessCrashed
from runtime.faults import NoFaults
from runtime.jobs import (
    DEFAULT_POLICY,
    EventKind,
    EvidenceRecord,
    JobPolicy,
    JobState,
    LeasedJob,
    Refusal,
    WorkerContext,
    new_job,
    run_once,
)
from runtime.seams import FaultPoints
from runtime.service import (
    AttemptOwner,
    CapabilityBinding,
    EvidenceKind,
    ServiceContext,
    ServiceJobAttempt,
    ServiceState,
    new_attempt,
    prepare,
    reconcile,
    submit,
)
from tests.unit.fakes import FakeClock, FakeEntropy, ScriptedFaults

pytestmark = pytest.mark.anyio

WS = "acme"
MODEL = "reference-1"


class AtPoint:
    """FaultPoints that runs `action` (and may then raise) at one named point."""

    def __init__(self, name: str, action: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        self.name = name
        self.action = action
        self.hits: list[dict[str, Any]] = []

    async def point(self, name: str, **context: Any) -> None:
        if name == self.name:
            self.hits.append(context)
            await self.action(context)


def test_both_points_are_catalogued_and_default_to_no_faults() -> None:
    for name in (faults.JOB_INFERENCE_RETURNED, faults.SERVICE_SUBMITTED_BEFORE_ACK):
        assert name in faults.CATALOGUE and faults.CATALOGUE[name].expected
    worker = WorkerContext(store=MemoryJobStore(), model=ReferenceModelClient(),
                           clock=FakeClock(), workspace=WS, worker_id="w", scopes=(WS,))
    service = ServiceContext(store=MemoryServiceStore(), driver=ReferenceServiceDriver(),
                             clock=FakeClock())
    assert isinstance(worker.faults, NoFaults) and isinstance(service.faults, NoFaults)


# -- job.inference_returned ------------------------------------------------------------------


class Jobs:
    def __init__(self, policy: JobPolicy = DEFAULT_POLICY) -> None:
        self.clock = FakeClock()
        self.store = MemoryJobStore()
        self.model = ReferenceModelClient()
        self.policy = policy

    def ctx(self, worker: str, faults_: FaultPoints | None = None) -> WorkerContext:
        return WorkerContext(
            store=self.store, model=self.model, clock=self.clock, workspace=WS,
            worker_id=worker, scopes=(WS,), policy=self.policy, entropy=FakeEntropy(),
            faults=faults_ or NoFaults(),
        )

    async def receive(self, payload: str = "name: Ada\nborn: 1815") -> LeasedJob:
        now = self.clock.now()
        evidence = EvidenceRecord(id=UUID(int=1001), workspace=WS, payload=payload,
                                  received_at=now)
        job = new_job(UUID(int=1), evidence, MODEL, now, self.policy)
        self.clock.advance(1)
        return await self.store.receive(evidence, job)

    async def job(self, job_id: UUID) -> LeasedJob:
        job = await self.store.get(job_id)
        assert job is not None
        return job


async def test_window_job_inference_returned_crash_the_old_fence_never_lands() -> None:
    w = Jobs()
    job = await w.receive()
    dying = ScriptedFaults()
    dying.raise_at(faults.JOB_INFERENCE_RETURNED, ProcessCrashed("w1"))
    with pytest.raises(ProcessCrashed):
        await run_once(w.ctx("w1", dying))
    assert dying.hits == [(faults.JOB_INFERENCE_RETURNED,
                           {"job_id": job.id, "fence": 1, "call": 1})]
    dead = await w.job(job.id)
    # The reply was in hand: the call was reserved (spent) before it went out, nothing staged.
    assert (dead.state, dead.fence, dead.lease_owner) == (JobState.QUEUED, 1, "w1")
    assert dead.model_calls_reserved == 1
    assert await w.store.interpretations(job.id) == [] and len(w.model.calls) == 1
    assert await w.store.evidence(job.evidence_id) is not None

    w.clock.advance(DEFAULT_POLICY.lease_s + 1)  # the lease lapses; another worker takes over
    done = await run_once(w.ctx("w2"))
    assert done is not None and done.state is JobState.PUBLISHED and done.fence == 2
    assert done.model_calls_reserved == 2  # the dead call stays counted
    assert [i.fence for i in await w.store.interpretations(job.id)] == [2]
    assert [(e.kind, e.fence, e.worker) for e in await w.store.attempts(job.id)] == [
        (EventKind.STARTED, 1, "w1"),
        (EventKind.EXPIRED_LEASE, 1, "w1"),
        (EventKind.STARTED, 2, "w2"),
        (EventKind.COMPLETED, 2, "w2"),
    ]


async def test_window_job_inference_returned_late_result_is_refused_and_budget_counted() -> None:
    w = Jobs()
    job = await w.receive("name: Ada")

    async def lapse_and_overtake(context: dict[str, Any]) -> None:
        w.clock.advance(DEFAULT_POLICY.lease_s + 30)  # the result travels past its lease
        newer = await run_once(w.ctx("w2"))
        assert newer is not None and newer.fence == 2 and newer.state is JobState.PUBLISHED

    late = AtPoint(faults.JOB_INFERENCE_RETURNED, lapse_and_overtake)
    result = await run_once(w.ctx("w1", late))
    assert [h["fence"] for h in late.hits] == [1]
    assert result is not None and result.fence == 2 and result.state is JobState.PUBLISHED
    assert result.model_calls_reserved == 2
    assert [i.fence for i in await w.store.interpretations(job.id)] == [2]
    refused = [e for e in await w.store.attempts(job.id) if e.refused is not None]
    assert [(e.kind, e.fence, e.refused) for e in refused] == [
        (EventKind.COMPLETED, 1, Refusal.STALE_FENCE)
    ]
    assert refused[0].usage is not None  # the late call's usage is kept, never zeroed


async def test_window_job_inference_returned_with_the_last_call_spent_exhausts() -> None:
    w = Jobs(JobPolicy(max_model_calls=1))
    job = await w.receive()
    dying = ScriptedFaults()
    dying.raise_at(faults.JOB_INFERENCE_RETURNED, ProcessCrashed("w1"))
    with pytest.raises(ProcessCrashed):
        await run_once(w.ctx("w1", dying))
    w.clock.advance(DEFAULT_POLICY.lease_s + 1)
    assert await run_once(w.ctx("w2")) is None  # nothing left to attempt
    # The only call was consumed by the dead worker: no second model call is made.
    after = await w.job(job.id)
    assert (after.state, after.model_calls_reserved) == (JobState.EXHAUSTED, 1)
    assert len(w.model.calls) == 1
    assert await w.store.interpretations(job.id) == []
    assert await w.store.evidence(job.evidence_id) is not None


# -- service.submitted_before_ack ----------------------------------------------------------


BINDING = CapabilityBinding(
    interface="image.generate", profile_revision="r7", profile_digest="sha256:abc",
    operation="render", driver_revision="d3", dialect_revision="v1",
)


class Service:
    def __init__(self, driver: ReferenceServiceDriver | None = None) -> None:
        self.clock = FakeClock()
        self.store = MemoryServiceStore()
        self.driver = driver or ReferenceServiceDriver()

    def ctx(self, faults_: FaultPoints | None = None) -> ServiceContext:
        return ServiceContext(store=self.store, driver=self.driver, clock=self.clock,
                              faults=faults_ or NoFaults())

    async def prepared(self) -> ServiceJobAttempt:
        attempt = new_attempt(
            UUID(int=7), owner=AttemptOwner(job="render-1"), idempotency_key="key-1",
            generation=0, request={"prompt": "a lighthouse"}, binding=BINDING,
            now=self.clock.now(),
        )
        return await prepare(self.ctx(), attempt)

    async def get(self, attempt_id: UUID) -> ServiceJobAttempt:
        attempt = await self.store.get(attempt_id)
        assert attempt is not None
        return attempt


async def test_window_service_submitted_before_ack_stays_submitting_and_lookup_adopts() -> None:
    w = Service()
    attempt = await w.prepared()
    seen: list[ServiceJobAttempt] = []

    async def die(context: dict[str, Any]) -> None:
        seen.append(await w.get(attempt.id))
        raise ProcessCrashed("killed with the acknowledgement in hand")

    dying = AtPoint(faults.SERVICE_SUBMITTED_BEFORE_ACK, die)
    with pytest.raises(ProcessCrashed):
        await submit(w.ctx(dying), attempt.id)
    assert dying.hits == [{"attempt_id": attempt.id, "provider_job_id": "prov-1",
                           "transmission": 1}]
    assert seen[0].state is ServiceState.SUBMITTING  # the window: after the CAS, before accept
    stuck = await w.get(attempt.id)
    assert (stuck.state, stuck.transmissions, stuck.provider_job_id, stuck.evidence) == (
        ServiceState.SUBMITTING, 1, None, ())
    assert w.driver.effects == ["prov-1"]

    recovered = await reconcile(w.ctx(), attempt.id)  # the next incarnation
    assert (recovered.state, recovered.provider_job_id) == (ServiceState.ACCEPTED, "prov-1")
    assert [e.kind for e in recovered.evidence] == [EvidenceKind.LOOKUP_FOUND]
    assert recovered.transmissions == 1 and len(w.driver.transmissions) == 1
    assert w.driver.effects == ["prov-1"]


async def test_window_service_submitted_before_ack_never_resubmits_without_proof() -> None:
    w = Service(ReferenceServiceDriver(lookup_proves_absence=False, replays_same_key=False))
    attempt = await w.prepared()
    dying = ScriptedFaults()
    dying.raise_at(faults.SERVICE_SUBMITTED_BEFORE_ACK, ProcessCrashed("killed"))
    with pytest.raises(ProcessCrashed):
        await submit(w.ctx(dying), attempt.id)
    w.driver.lookup_faults.append("hide")  # the first lookup lies: the job looks unknown
    unsure = await reconcile(w.ctx(), attempt.id)
    assert unsure.state is ServiceState.INDETERMINATE and unsure.transmissions == 1
    assert [e.kind for e in unsure.evidence] == [EvidenceKind.LOOKUP_ABSENT]
    assert len(w.driver.transmissions) == 1 and w.driver.effects == ["prov-1"]  # no resubmit
    adopted = await reconcile(w.ctx(), attempt.id)  # the lookup tells the truth
    assert (adopted.state, adopted.provider_job_id) == (ServiceState.ACCEPTED, "prov-1")
    assert len(w.driver.transmissions) == 1 and w.driver.effects == ["prov-1"]
