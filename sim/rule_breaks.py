"""Test-only breaks of single seed rules: one realistic maintainer's bug each.

Each replacement keeps everything else of the original and drops exactly one
rule (a guard, a fence, a field), so the rule catalogue (`sim.rules`) can
show that the simulator's oracle notices that rule alone. `sim.breaks`
merges these into `BREAKS`; like those, they are only ever used in tests,
campaigns run with `SIM_BREAK`, and the gate's break sweep.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, cast
from uuid import UUID

import anyio
from pydantic import Field

from runtime import cancel as cancel_module
from runtime import engine as engine_module
from runtime.adapters import settle_rule
from runtime.adapters.memory.gate import enter
from runtime.adapters.memory.jobs_store import MemoryJobStore
from runtime.adapters.memory.ledger import MemoryLedger
from runtime.app import lifespan as lifespan_module
from runtime.cancel import Canceller
from runtime.engine import RunEngine, Submission
from runtime.errors import (
    BrokerUnavailable,
    IdempotencyConflict,
    RetentionFailed,
    SessionBusy,
    StopUnproven,
    UnknownPattern,
)
from runtime.events.bus import EventBus
from runtime.events.channel import ResyncReason, RunChannel, Subscription
from runtime.events.errors import EventError, StepWriteFailed, StepWriterClosed
from runtime.events.hop import PUBLISH_BOUND_S, TERMINAL_KINDS, HopEvents
from runtime.events.model import Event
from runtime.events.writer import GROUP_COMMIT_LIMIT, StepWriter
from runtime.graph.budget import HardwareBudgetExhausted, HardwareResumeBudget
from runtime.graph.snapshots import NodeSnapshot
from runtime.graph.transitions import NeedHardware
from runtime.jobs import models as job_models
from runtime.jobs import rules as job_rules
from runtime.jobs import worker as jobs_worker
from runtime.jobs.errors import JobConflict, JobError, LeaseExpired
from runtime.jobs.model import InvalidOutput, ModelReply, read_bundle
from runtime.jobs.models import (
    AttemptEvent,
    AttemptFailure,
    EventKind,
    EvidenceRecord,
    JobPolicy,
    JobState,
    LeasedJob,
    Refusal,
    Usage,
)
from runtime.keys import hop_key
from runtime.models import (
    AgentJobStatus,
    Claim,
    Consent,
    ConsentStatus,
    DeliveryState,
    Intent,
    ResumeMode,
    Run,
    RunDelivery,
    RunStatus,
    Settlement,
)
from runtime.recovery import debts
from runtime.recovery import supervisor as supervisor_module
from runtime.recovery.boot_lease import BootLeaseKeeper
from runtime.recovery.deliveries import DeliveryRecovery, DeliveryVerdict
from runtime.recovery.relay import Relays
from runtime.registry import Pattern, WorkflowRegistry
from runtime.seams import Deps, JobStatus
from runtime.service import ServiceContext
from runtime.service import attempts as service_attempts
from runtime.service import models as service_models
from runtime.service import rules as service_rules
from runtime.service.errors import (
    IllegalTransition,
    ResubmitRefused,
    ServiceError,
    ServicePayloadConflict,
)
from runtime.service.models import (
    Evidence,
    EvidenceKind,
    ServiceJobAttempt,
    ServiceOutcome,
    ServiceState,
)
from runtime.sessions import AdmissionCoordinator, KeyedLocks
from runtime.stasis import consent as consent_module
from runtime.stasis import waits as waits_module
from runtime.stasis.waits import ResumeRefused, Waits
from runtime.worker import Worker
from sim.break_table import BreakTable

# -- seed 000 "Admission and exact claim" ------------------------------------------------


async def _settle_without_claim(
    self: MemoryLedger, run_id: UUID, seq: int, settlement: Settlement, now: datetime,
    step: tuple[str, dict[str, Any]] | None = None,
    before: Sequence[tuple[str, dict[str, Any]]] = (),
) -> Run | None:
    """Settlement that checks the sequence but not the claim: a hop whose Run is
    CANCELLING (or whose delivery is no longer CLAIMED) still settles it."""
    settle = RULE_BREAKS.unbroken(_settle_without_claim)
    settled = await settle(self, run_id, seq, settlement, now, step, before)
    run = self.run_table.get(run_id)
    d = self.delivery_table.get((run_id, seq))
    if settled is not None or run is None or d is None or run.seq != seq or run.status.terminal:
        return settled
    run = self._put_run(run, status=settlement.status, result=settlement.result,
                        error=settlement.error, updated_at=now)
    self._put_delivery(d, state=DeliveryState.SETTLED, updated_at=now)
    self._settlement_steps(run_id, seq, settle_rule.check_steps(step, before), now)
    return run


async def _claim_restamps_started_at(
    self: MemoryLedger, run_id: UUID, seq: int, boot_id: str, token: str, now: datetime
) -> Claim:
    """The exact claim, but every claim (a resume too) writes started_at anew."""
    exact_claim = RULE_BREAKS.unbroken(_claim_restamps_started_at)
    claim = await exact_claim(self, run_id, seq, boot_id, token, now)
    if claim.claimed and claim.run is not None and claim.run.started_at != now \
            and claim.delivery is not None and claim.delivery.updated_at == now:
        run = self._put_run(claim.run, started_at=now)
        return Claim(claimed=True, run=run, delivery=claim.delivery)
    return claim


def _doctrine_priority(self: RunDelivery) -> int:
    """The broker priority written as the doctrine priority, not inverted."""
    return self.priority


def _fingerprint_without_priority(self: Intent) -> str:
    """An admission fingerprint that forgets the priority field."""
    material = {"session": self.session, "prompt": self.prompt, "source": self.source,
                "sigil": self.sigil, "scopes": list(self.scopes), "content": self.content,
                "pattern": self.pattern}
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _fingerprint_in_key_order(self: Intent) -> str:
    """An admission fingerprint of the content as sent, its keys unsorted: a replay that
    rebuilt its JSON in another key order is refused as a conflict (the mutation
    tool's survivor `models.py:104`, `sort_keys=False`)."""
    material = {"session": self.session, "prompt": self.prompt, "source": self.source,
                "sigil": self.sigil, "scopes": list(self.scopes), "content": self.content,
                "priority": self.priority, "pattern": self.pattern}
    blob = json.dumps(material, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


async def _fence_before_replay(self: RunEngine, intent: Intent,
                               retain: Any = None) -> Submission:
    """Admission that fences the session before it looks for the key's prior Run: an
    exact replay is refused SessionBusy while any Run of its session is active (the
    mutation tool's survivor `engine.py:117`, the prior lookup skipped for keyed
    Intents; caught by replay_before_fence)."""
    checked = engine_module.validated_intent(intent)
    if checked.session is not None and checked.idempotency_key is not None:
        await self._fence_session(checked, None)
    return await RULE_BREAKS.unbroken(_fence_before_replay)(self, intent, retain)


async def _no_session_fence(self: RunEngine, intent: Intent, run_id: UUID | None) -> None:
    """Admission that never looks for another nonterminal Run of the session."""
    return None


def _session_never_busy(self: MemoryLedger, run: Run) -> Run | None:
    """The ledger's half of the session fence forgotten: alone (session_fence_in_process,
    the fence as each process kept it before issue 15) or as no_session_fence's
    companion."""
    return None


async def _publish_marks_on_failure(self: RunEngine, delivery: RunDelivery) -> RunDelivery:
    """A publish that records PUBLISHED even when the broker never took the job."""
    result = await RULE_BREAKS.unbroken(_publish_marks_on_failure)(self, delivery)
    if result.state is not DeliveryState.PENDING:
        return result
    marked = await self.deps.ledger.mark_published(
        delivery.run_id, delivery.seq, self.deps.clock.now())
    return marked or result


async def _replay_answers_created(self: RunEngine, prior: Run, intent: Intent,
                                  retain: Any) -> Submission:
    """A replay that returns the existing Run but tells its caller it was created."""
    got = await RULE_BREAKS.unbroken(_replay_answers_created)(self, prior, intent, retain)
    return dataclasses.replace(got, created=True)


async def _publish_unless_submitting(self: RunEngine, delivery: RunDelivery) -> RunDelivery:
    """Admission that commits but leaves its publish to the relay: the publish is
    skipped when submit (or its replay) awaits it, and runs for everyone else."""
    caller = sys._getframe(1).f_code
    if caller in (RunEngine.submit.__code__, RunEngine._replay.__code__):
        return delivery
    return await RULE_BREAKS.unbroken(_publish_unless_submitting)(self, delivery)


def _refuse_unless_failed(run: Run, delivery: RunDelivery) -> RunDelivery:
    """The guard of a released generation written the wrong way round: every
    generation but a FAILED one is answered RetentionFailed (and is not published)."""
    if delivery.state is not DeliveryState.FAILED:
        raise RetentionFailed(f"Run {run.id}: held delivery {delivery.seq} was not released")
    return delivery


async def _fence_sessionless_too(self: RunEngine, intent: Intent, run_id: UUID | None) -> None:
    """The session fast path without its early return: a sessionless Intent is fenced
    against every other sessionless Run still active."""
    active = await self.deps.ledger.runs_in_session(intent.session, 16)  # type: ignore[arg-type]
    for other in active:
        if other.id != run_id:
            raise SessionBusy(intent.session or "", other.id)


def _records_without_holder(
    self: RunEngine, intent: Intent, run_id: UUID | None, held: bool
) -> tuple[Run, RunDelivery]:
    """The admission's records with the HELD delivery's owner left out."""
    run, delivery = RULE_BREAKS.unbroken(_records_without_holder)(self, intent, run_id, held)
    return run, delivery.model_copy(update={"held_by": None})


def _records_unscoped(
    self: RunEngine, intent: Intent, run_id: UUID | None, held: bool
) -> tuple[Run, RunDelivery]:
    """The admission's records with a keyed Run's idempotency scope left out."""
    run, delivery = RULE_BREAKS.unbroken(_records_unscoped)(self, intent, run_id, held)
    return run.model_copy(update={"idempotency_scope": None}), delivery


def _oldest_version(self: WorkflowRegistry, name: str) -> Pattern:
    """Admission pins the oldest registered version of a Pattern, not its latest: a
    newer release's admissions run the version the older boots also hold."""
    versions = [v for (n, v) in self._patterns if n == name]
    if not versions:
        raise UnknownPattern(name)
    return self._patterns[(name, min(versions))]


def _validated_unreported(intent: Intent) -> Intent:
    """The admission edge's re-validation, with pydantic's error passed on as it is
    instead of the InvalidIntent naming the field."""
    return Intent.model_validate(intent.model_dump())


@asynccontextmanager
async def _hold_never_dropped(self: KeyedLocks, key: str) -> AsyncIterator[None]:
    """A per-key lock that is created on first use and kept for ever."""
    lock, _ = self._locks.setdefault(key, (anyio.Lock(), 0))
    async with lock:
        yield


@asynccontextmanager
async def _admitting_without_key_lock(
    self: AdmissionCoordinator, key: str | None, session: str | None
) -> AsyncIterator[None]:
    """Admission that fences the session but never single-flights the key: two
    same-key calls in one process both run their retention hooks at once."""
    async with self._maybe(self.sessions, session):
        yield


def _conflict_without_key(key: str, run_id: UUID) -> IdempotencyConflict:
    """The idempotency conflict raised without the key the caller reused."""
    return IdempotencyConflict("", run_id)


async def _mark_published_any_state(
    self: MemoryLedger, run_id: UUID, seq: int, now: datetime
) -> RunDelivery | None:
    """The acknowledgement write without its PENDING guard: a late acknowledgement
    moves a CLAIMED, SETTLED or FAILED delivery back to PUBLISHED."""
    await enter()
    d = self.delivery_table.get((run_id, seq))
    if d is None or d.state is DeliveryState.HELD:
        return d
    return self._put_delivery(d, state=DeliveryState.PUBLISHED, updated_at=now)


async def _rotate_publishes_old_key(self: DeliveryRecovery, run: Run) -> DeliveryVerdict:
    """Delivery rotation that moves the ledger to a fresh sequence but publishes the
    old generation's hop key again. Every rotation path (a finished job, a fenced
    pre-boot job, a dead boot's stranded job) goes through `_rotate`."""
    deps = self.engine.deps
    old = await deps.ledger.get_delivery(run.id, run.seq)
    rotated = await deps.ledger.rotate_delivery(run.id, run.seq, deps.clock.now())
    if rotated is None:
        return DeliveryVerdict.SETTLED_ELSEWHERE
    await self.engine.publish(old or rotated)  # the bug: the old generation's key
    return DeliveryVerdict.ROTATED


async def _release_before_retention(
    self: RunEngine, run: Run, delivery: RunDelivery, retain: object
) -> RunDelivery:
    """HELD -> PENDING first, the caller's retention hook afterwards (order swapped)."""
    released = await self.deps.ledger.release_held(run.id, delivery.seq, self.deps.clock.now())
    await retain(run)  # type: ignore[operator]
    return released or delivery


async def _relay_never_republishes(self: DeliveryRecovery, run: Run) -> DeliveryVerdict:
    """Delivery recovery that trusts a missing broker job to come back by itself."""
    delivery = await self.engine.deps.ledger.get_delivery(run.id, run.seq)
    if delivery is not None and delivery.state in (DeliveryState.PENDING,
                                                   DeliveryState.PUBLISHED) \
            and await self.engine.deps.broker.probe(delivery.key) is None:
        return DeliveryVerdict.RETAINED
    return await RULE_BREAKS.unbroken(_relay_never_republishes)(self, run)


async def _cancel_over_terminal(self: MemoryLedger, run_id: UUID, now: datetime) -> Run | None:
    """begin_cancel without its terminal guard: a cancel racing completion reopens the Run."""
    await enter()
    run = self.run_table.get(run_id)
    if run is None or run.status is RunStatus.CANCELLING:
        return run
    if run.status.terminal and run.status is not RunStatus.CANCELLED:
        return self._put_run(run, status=RunStatus.CANCELLING, updated_at=now)
    return await RULE_BREAKS.unbroken(_cancel_over_terminal)(self, run_id, now)


# -- seed 003 "Return makes a new claim", "Three boundaries" -------------------------------


async def _readmit_consent_without_cas(
    self: MemoryLedger, run_id: UUID, consent_id: UUID, now: datetime
) -> RunDelivery | None:
    """Re-admission by the generic status writer: any Run parked on that consent goes
    back to QUEUED, whether or not the consent was decided."""
    await enter()
    run = self.run_table.get(run_id)
    if run is None or run.status is not RunStatus.AWAITING_CONSENT or run.consent_id != consent_id:
        return None
    return self._readmit(run, now)


def _readmit_same_sequence(self: MemoryLedger, run: Run, now: datetime) -> RunDelivery:
    """A return that re-opens the parked generation instead of allocating seq + 1."""
    prev = self.delivery_table[(run.id, run.seq)]
    fresh = prev.model_copy(update={"state": DeliveryState.PENDING, "mode": ResumeMode.RESUME,
                                    "claimed_boot": None, "claim_token": None,
                                    "updated_at": now})
    self.delivery_table[(run.id, run.seq)] = fresh
    self._put_run(run, status=RunStatus.QUEUED, updated_at=now)
    return fresh


async def _relay_readmits_running_delegate(self: Relays, run: Run) -> bool:
    """The delegate relay re-admits as soon as it has looked, finished job or not."""
    await RULE_BREAKS.unbroken(_relay_readmits_running_delegate)(self, run)
    fresh = await self.engine.deps.ledger.get_run(run.id)
    if fresh is None or fresh.status is not RunStatus.AWAITING_DELEGATE \
            or fresh.agent_job_id is None:
        return True
    delivery = await self.engine.deps.ledger.readmit_after_delegate(
        run.id, fresh.agent_job_id, self.engine.deps.clock.now())
    if delivery is not None:
        await self.engine.publish(delivery)
    return delivery is not None


async def _readmit_delegate_any_state(
    self: MemoryLedger, run_id: UUID, job_id: UUID, now: datetime
) -> RunDelivery | None:
    """The delegate owner CAS without its terminal-job condition."""
    await enter()
    run = self.run_table.get(run_id)
    if run is None or run.status is not RunStatus.AWAITING_DELEGATE or run.agent_job_id != job_id:
        return None
    return self._readmit(run, now)


async def _relay_readmits_open_attempt(self: Relays, run: Run) -> bool:
    """The service relay re-admits once it has advanced the attempt, terminal or not."""
    await RULE_BREAKS.unbroken(_relay_readmits_open_attempt)(self, run)
    fresh = await self.engine.deps.ledger.get_run(run.id)
    if fresh is None or fresh.status is not RunStatus.AWAITING_SERVICE \
            or fresh.service_attempt_id is None:
        return True
    delivery = await self.engine.deps.ledger.readmit_after_service(
        run.id, fresh.service_attempt_id, self.engine.deps.clock.now())
    if delivery is not None:
        await self.engine.publish(delivery)
    return delivery is not None


async def _readmit_service_any_state(
    self: MemoryLedger, run_id: UUID, attempt_id: UUID, now: datetime
) -> RunDelivery | None:
    """The service owner CAS without its proved-terminal condition."""
    await enter()
    run = self.run_table.get(run_id)
    if run is None or run.status is not RunStatus.AWAITING_SERVICE \
            or run.service_attempt_id != attempt_id:
        return None
    return self._readmit(run, now)


def _budget_reset(self: HardwareResumeBudget, capability: str) -> HardwareResumeBudget:
    """Every convergence call charges a fresh budget: the counters never accumulate."""
    return RULE_BREAKS.unbroken(_budget_reset)(HardwareResumeBudget(), capability)


# -- seed 000 "Events, settlement, and waits"; startup reconciliation -----------------------


async def _repair_always(deps: Deps, run: Run) -> bool:
    """Startup evidence repair that never looks for the terminal Step it would add."""
    if not run.status.terminal:
        return False
    async with StepWriter(deps.ledger, deps.clock, run.id, run.seq) as writer:
        await writer.repair(TERMINAL_KINDS[run.status].value,
                            {"error": run.error, "repaired": True})
    return True


async def _every_terminal_run(
    self: MemoryLedger, after: tuple[datetime, UUID] | None, limit: int
) -> list[Run]:
    """Evidence debts read as every terminal Run (startup's old full page)."""
    await enter()
    found = [r for r in self.run_table.values()
             if r.status.terminal and (after is None or (r.updated_at, r.id) > after)]
    return sorted(found, key=lambda r: (r.updated_at, r.id))[:limit]


async def _relay_orphans_own_boot(self: Relays, run: Run) -> bool:
    """The relay's orphan pass without its own-boot check: it fences the broker job of a
    hop this very boot is still running, and fails the Run unless the ledger refuses."""
    deps = self.engine.deps
    key = hop_key(run.id, run.seq)
    job = await deps.broker.probe(key)
    if job is not None and job.status.live and job.status is not JobStatus.ABORTING:
        with contextlib.suppress(BrokerUnavailable):
            await deps.broker.abort(key, "fenced: orphaned by process death")
    return await RULE_BREAKS.unbroken(_relay_orphans_own_boot)(self, run)


def _offer_drops_silently(self: Subscription, event: Event) -> None:
    """A slow reader's full queue drops its oldest events without a resync boundary."""
    if self._done or self._resync is not None:
        return
    self._queue.append(event)  # the deque's maxlen silently drops the oldest
    self._wake.notify()


def _offer_resyncs_one_short(self: Subscription, event: Event) -> None:
    """A reader's queue counted full one event early: the 256th undelivered event becomes
    a resync boundary instead of being queued (caught by reader_queue_bound)."""
    if self._done or self._resync is not None:
        return
    if len(self._queue) >= self._channel._queue_limit - 1:
        self._queue.clear()
        self._resync = ResyncReason.FELL_BEHIND
    else:
        self._queue.append(event)
    self._wake.notify()


# -- seed 000 "Cancellation, mutation, and recovery" ---------------------------------------


async def _contain_children_only(self: Canceller, run: Run) -> bool:
    """Containment that fences every child but forgets the Run's own broker job."""
    return bool(await self.contain_children(run))


async def _fence_only_aborting(self: Canceller, run: Run) -> bool:
    """A parent fence whose test is inverted: it re-sends the abort only to a job
    already aborting and merely waits for a live one to finish by itself."""
    key = hop_key(run.id, run.seq)
    for _ in range(cancel_module.ABORT_ATTEMPTS):
        job = await self.deps.broker.probe(key)
        if job is None or job.status.finished:
            return True
        if job.status is JobStatus.ABORTING:
            with contextlib.suppress(BrokerUnavailable):
                await self.deps.broker.abort(key, "cancelled")
        if await self._acknowledged(key):
            return True
    return False


async def _agent_refusal_raises(self: Canceller, run: Run) -> bool:
    """Agent job containment that turns the agent runtime's refusal into an error
    out of the cancel instead of an honest, retryable CANCELLING."""
    for job in await self.deps.ledger.agent_jobs_of(run.id):
        if job.status.terminal and job.status is not AgentJobStatus.LOST:
            continue
        if self.deps.agents is None or not await self.deps.agents.cancel(job.id):
            raise StopUnproven(f"agent job {job.id} refused its cancel")
        await self.deps.ledger.record_agent_job(
            job.id, AgentJobStatus.CANCELLED, None, self.deps.clock.now()
        )
    return True


async def _agent_sweep_stops_at_settled(self: Canceller, run: Run) -> bool:
    """Agent job containment that stops at the Run's first settled job (a `break`
    where the sweep should skip it), leaving a later live job running."""
    for job in await self.deps.ledger.agent_jobs_of(run.id):
        if job.status.terminal and job.status is not AgentJobStatus.LOST:
            break
        if self.deps.agents is None or not await self.deps.agents.cancel(job.id):
            return False
        await self.deps.ledger.record_agent_job(
            job.id, AgentJobStatus.CANCELLED, None, self.deps.clock.now()
        )
    return True


async def _attempt_sweep_stops_at_settled(self: Canceller, run: Run) -> bool:
    """Service attempt containment that stops at the Run's first settled attempt,
    leaving a later open attempt unsettled under CANCELLED."""
    services = self.deps.services
    if services is None:
        return True
    for attempt in await services.store.owned_by(run.id):
        if attempt.state.terminal:
            break
        try:
            after = await service_attempts.cancel(services, attempt.id)
        except ServiceError:
            return False
        if not after.state.terminal:
            return False
    return True


async def _children_without_consents(self: Canceller, run: Run) -> bool:
    """Child containment that leaves pending consents to `finish_cancel`'s own sweep,
    forgetting that orphan recovery fails a Run through this path too."""
    return bool(await self._contain_agent_jobs(run)
                and await self._contain_service_attempts(run))


async def _fence_gives_up_on_lost_ack(self: Canceller, run: Run) -> bool:
    """A parent fence that takes a lost abort acknowledgement for a refusal and
    answers CANCELLING at once, instead of re-probing the job it did abort."""
    key = hop_key(run.id, run.seq)
    for _ in range(cancel_module.ABORT_ATTEMPTS):
        job = await self.deps.broker.probe(key)
        if job is None or job.status.finished:
            return True
        if job.status is not JobStatus.ABORTING:
            try:
                await self.deps.broker.abort(key, "cancelled")
            except BrokerUnavailable:
                return False
        if await self._acknowledged(key):
            return True
    return False


# -- seed 004 leased jobs ----------------------------------------------------------------


def _attempts_unbounded(job: LeasedJob, *, attempts_needed: int) -> str | None:
    """The claim's budget check forgets the worker attempt budget."""
    if job.model_calls_reserved >= job.max_model_calls:
        return job_rules.EXHAUSTED_CALLS
    return None


def _usage_zero_when_unknown(job: LeasedJob, index: int, kind: EventKind, now: datetime,
                             **kw: object) -> object:
    """The attempt log records unknown usage as zero tokens instead of None."""
    if kind in (EventKind.COMPLETED, EventKind.FAILED) and kw.get("usage") is None:
        kw["usage"] = Usage(input_tokens=0, output_tokens=0)
    return RULE_BREAKS.unbroken(_usage_zero_when_unknown)(job, index, kind, now, **kw)


def _next_event_from_one(self: MemoryJobStore, job_id: UUID) -> int:
    """The store numbers a job's next attempt event one past its log's length: the log
    starts at 1 and its numbers no longer match the events' places."""
    return len(self.event_log.get(job_id, ())) + 1


class _AttemptEventFromZero(AttemptEvent):
    """An attempt event whose interpretation bound admits 0 (the mutation tool's survivor
    `jobs/models.py:217`, `ge=1` made `ge=0`): a record naming an interpretation no
    job ever has is taken."""

    interpretation: int = Field(ge=0)


class _JobPolicyNegativeBase(JobPolicy):
    """A job policy whose retry base admits down to -1 (the mutation tool's survivor
    `jobs/models.py:90`, `ge=0` made `ge=-1`): a negative backoff is taken."""

    retry_base_s: float = Field(default=5.0, ge=-1)


def _withdraw_numbered_from_start(
    job: LeasedJob, reason: str, now: datetime, next_event: int
) -> job_rules.Decision:
    """A withdrawal that numbers each event it records at the log's length: the failure
    after a lapsed lease's expired-lease event takes that event's number (the mutation
    tool's survivor `jobs/rules.py:523`, `next_event + len(events)` made `>>`)."""
    decision = RULE_BREAKS.unbroken(_withdraw_numbered_from_start)(job, reason, now, next_event)
    events = tuple(e.model_copy(update={"index": next_event}) for e in decision.events)
    return dataclasses.replace(decision, events=events)


def _attempt_event_unchecked(**fields: Any) -> AttemptEvent:
    """The decisions build attempt events without validating them: a refused call's
    event keeps whatever fence its caller gave, a negative one included."""
    return AttemptEvent.model_construct(**fields)


@classmethod  # type: ignore[misc]
def _evidence_json_unchecked(cls: type[EvidenceRecord], data: str | bytes,
                             **kw: Any) -> EvidenceRecord:
    """An evidence record decoded from JSON takes an empty workspace on trust."""
    raw = json.loads(data)
    if isinstance(raw, dict) and raw.get("workspace") == "":
        return cls.model_construct(**raw)
    original: Any = RULE_BREAKS.unbroken(_evidence_json_unchecked)  # bound to the class
    return cast(EvidenceRecord, original(data, **kw))


@classmethod  # type: ignore[misc]
def _attempt_decode_raw(cls: type[ServiceJobAttempt], data: Any,
                        **kw: Any) -> ServiceJobAttempt:
    """An attempt record is read field by field before validation: a record without its
    binding or request raises KeyError instead of a validation error naming the field."""
    if isinstance(data, dict):
        _ = (data["binding"], data["request"])
    original: Any = RULE_BREAKS.unbroken(_attempt_decode_raw)  # bound to the class
    return cast(ServiceJobAttempt, original(data, **kw))


async def _reserve_in_memory_only(
    self: MemoryJobStore, job_id: UUID, fence: int, owner: str, now: datetime
) -> LeasedJob:
    """A reservation that is checked and counted but never committed: the model call
    then goes out with nothing durable spent, so a crash gives the call back."""
    await enter()
    job = self._job(job_id)
    decision = job_rules.decide_reserve(job, fence, owner, now, self._next_event(job_id))
    if decision.error is not None:
        raise decision.error
    return decision.job


def _every_refusal_lease_expired(job: LeasedJob, fence: int, owner: str,
                                 refusal: Refusal) -> JobError:
    """Every fence refusal reported as a lapsed lease (a stale fence, a closed attempt
    and another owner included): callers and operators read the wrong reason."""
    return LeaseExpired(job.id, fence)


def _renewal_ignored(job: LeasedJob, fence: int, owner: str, now: datetime,
                     renew_every_s: float = 20.0) -> job_rules.Decision:
    """A renewal that checks the lease and then extends nothing."""
    refusal = job_rules.check_lease(job, fence, owner, now)
    if refusal is not None:
        return job_rules.Decision(job=job,
                                  error=job_rules.refusal_error(job, fence, owner, refusal))
    return job_rules.unchanged(job)


class _UncheckedContext:
    """The worker's view of its model without a context bound: the pre-call size
    check never fails, so an oversized payload goes to the model."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.version = model.version
        self.context_limit = sys.maxsize

    async def extract(self, request: Any) -> Any:
        return await self.model.extract(request)


async def _attempt_without_size_check(self: Any) -> LeasedJob:
    """An attempt that leaves the context bound to the model (no check before the call)."""
    self.ctx = dataclasses.replace(self.ctx, model=_UncheckedContext(self.ctx.model))
    return await RULE_BREAKS.unbroken(_attempt_without_size_check)(self)


def _lenient_bundle(output: Any) -> tuple[JobState, dict[str, Any]]:
    """A bundle validator that mends what it should refuse: a malformed output is staged
    published with whatever assertions objects it holds (the jobs-group mutants of
    read_bundle's shape checks that let a bad shape through)."""
    try:
        return RULE_BREAKS.unbroken(_lenient_bundle)(output)
    except InvalidOutput:
        found = output.get("assertions") if isinstance(output, dict) else None
        kept = [a for a in found if isinstance(a, dict)] if isinstance(found, list) else []
        return JobState.PUBLISHED, {"assertions": kept, "needs": None}


async def _invalid_output_retried(self: Any, reply: ModelReply) -> LeasedJob:
    """A worker that takes an invalid model output for a passing fault: the attempt
    schedules a retry (another call may answer well) instead of failing the job."""
    try:
        read_bundle(reply.output)
    except InvalidOutput as exc:
        return cast(LeasedJob, await self._retry(AttemptFailure(
            reason=f"invalid model output: {exc}", usage=reply.usage)))
    return await RULE_BREAKS.unbroken(_invalid_output_retried)(self, reply)


async def _invalid_output_abandoned(self: Any, reply: ModelReply) -> LeasedJob:
    """A worker that drops an invalid model output and goes on: the attempt is left open
    until its lease lapses (another worker's call may then answer well)."""
    try:
        read_bundle(reply.output)
    except InvalidOutput:
        return cast(LeasedJob, await self._current())
    return await RULE_BREAKS.unbroken(_invalid_output_abandoned)(self, reply)


class _AnyVersion:
    """The worker's view of its model claiming whatever version the job asks for: the
    pre-call version check never hands the attempt back."""

    def __init__(self, model: Any, version: str) -> None:
        self.model = model
        self.version = version
        self.context_limit = model.context_limit

    async def extract(self, request: Any) -> Any:
        return await self.model.extract(request)


async def _attempt_any_model_version(self: Any) -> LeasedJob:
    """An attempt that calls its model whatever model version the job was made for."""
    self.ctx = dataclasses.replace(self.ctx,
                                   model=_AnyVersion(self.ctx.model, self.job.model_version))
    return await RULE_BREAKS.unbroken(_attempt_any_model_version)(self)


def _interpretation_now(events: Any, fence: int, default: int) -> int:
    """The interpretation of a fenced-out call read as the job's current one (wrong once
    the job was reprocessed while the call's result was in flight)."""
    return default


def _receipt_refuses_repeats(evidence: Any, job: LeasedJob, stored_evidence: Any,
                             stored_job: LeasedJob | None) -> tuple[bool, bool]:
    """A receipt that takes any job id already stored as a conflict, even for the very
    same work sent again (so an at-least-once producer sees its repeat refused)."""
    if stored_job is not None:
        raise JobConflict(job.id, "the job id is already used")
    return RULE_BREAKS.unbroken(_receipt_refuses_repeats)(evidence, job, stored_evidence,
                                                          stored_job)


def _receipt_takes_newer_version(evidence: Any, job: LeasedJob, stored_evidence: Any,
                                 stored_job: LeasedJob | None) -> tuple[bool, bool]:
    """A receipt that compares model versions by order, not equality (the mutation tool's
    survivor `jobs/rules.py:144`, `!=` made `>`): the same job sent again under a newer
    model version is taken as the stored job."""
    if stored_job is not None and job.model_version > stored_job.model_version:
        job = job.model_copy(update={"model_version": stored_job.model_version})
    return RULE_BREAKS.unbroken(_receipt_takes_newer_version)(evidence, job, stored_evidence,
                                                              stored_job)


def _backoff_from_this_attempt(self: Any, attempts_used: int) -> float:
    """A retry backoff counted from the attempt just made, not the one before: every
    wait is twice the policy's."""
    return float(min(self.retry_max_s, self.retry_base_s * 2 ** max(0, attempts_used)))


def _backoff_halved(self: Any, attempts_used: int) -> float:
    """A retry backoff counted one attempt early: every wait after the first is half the
    policy's (the first is clamped to the base, as `max(0, n - 2)` reads it)."""
    return float(min(self.retry_max_s, self.retry_base_s * 2 ** max(0, attempts_used - 2)))


def _claim_half_lease(job: LeasedJob, worker_id: str, now: datetime, lease_s: float,
                      next_event: int) -> job_rules.Decision:
    """A claim that leases the job for half the term asked for."""
    return RULE_BREAKS.unbroken(_claim_half_lease)(job, worker_id, now, lease_s / 2,
                                                   next_event)


def _lease_check_without_repeats(job: LeasedJob, fence: int, owner: str, now: datetime,
                                 repeat: Any = None) -> Refusal | None:
    """The lease check with the repeat test dropped: a retry of the very closing (after
    an ambiguous commit) is refused as a closed attempt."""
    return RULE_BREAKS.unbroken(_lease_check_without_repeats)(job, fence, owner, now)


def _digest_of_prefix(payload: str) -> str:
    """An evidence digest over the payload's first 64 characters only."""
    return hashlib.sha256(payload[:64].encode()).hexdigest()


def _reprocess_keeps_budgets(job: LeasedJob, now: datetime) -> job_rules.Decision:
    """Reprocessing that forgets to reset the spent attempt and call budgets."""
    decision = RULE_BREAKS.unbroken(_reprocess_keeps_budgets)(job, now)
    if decision.error is not None:
        return decision
    kept = decision.job.model_copy(update={"attempts_used": job.attempts_used,
                                           "model_calls_reserved": job.model_calls_reserved})
    return dataclasses.replace(decision, job=kept)


# -- seed 000 "Service job attempts" --------------------------------------------------------


def _prepare_ignores_payload(
    attempt: ServiceJobAttempt, by_id: ServiceJobAttempt | None, by_key: ServiceJobAttempt | None
) -> ServiceJobAttempt | None:
    """Preparation that returns the stored attempt of a key whatever its payload."""
    stored = by_key if by_key is not None else by_id
    if stored is not None and stored.request_digest != attempt.request_digest:
        return stored
    return RULE_BREAKS.unbroken(_prepare_ignores_payload)(attempt, by_id, by_key)


def _cancel_intent_dropped(attempt: ServiceJobAttempt, now: datetime) -> ServiceJobAttempt:
    """A cancel request that is acted on but never persisted: workers cannot re-drive it
    and a re-submit is not held back by it."""
    return attempt


async def _absent_never_resubmits(ctx: ServiceContext, attempt: ServiceJobAttempt
                                  ) -> ServiceJobAttempt:
    """Reconciliation that reads the re-submit policy as off: a proof of no effect parks
    the attempt INDETERMINATE instead of re-submitting it."""
    never = dataclasses.replace(ctx, resubmit=False)
    return await RULE_BREAKS.unbroken(_absent_never_resubmits)(never, attempt)


async def _absent_never_cancels(ctx: ServiceContext, attempt: ServiceJobAttempt
                                ) -> ServiceJobAttempt:
    """Reconciliation that, with a cancel requested, parks a provably absent job
    INDETERMINATE instead of settling the attempt CANCELLED."""
    if attempt.cancel_requested_at is not None and attempt.provider_job_id is None \
            and ctx.driver.lookup_proves_absence:
        proof = Evidence(kind=EvidenceKind.NO_EFFECT, at=ctx.clock.now(),
                         transmission=attempt.transmissions, detail="lookup proves no job")
        return await ctx.store.mark_indeterminate(attempt.id, proof, ctx.clock.now())
    return await RULE_BREAKS.unbroken(_absent_never_cancels)(ctx, attempt)


def _prepare_refuses_new_keys(attempt: ServiceJobAttempt, by_id: ServiceJobAttempt | None,
                              by_key: ServiceJobAttempt | None) -> ServiceJobAttempt | None:
    """A prepare whose freshness guard is inverted for a key not seen yet: it refuses the
    very records it should insert."""
    if by_id is None and by_key is None:
        raise IllegalTransition(attempt.id, attempt.state.value, "be prepared: not fresh")
    return RULE_BREAKS.unbroken(_prepare_refuses_new_keys)(attempt, by_id, by_key)


def _indeterminate_only_when_terminal(attempt: ServiceJobAttempt, evidence: Evidence,
                                      now: datetime) -> ServiceJobAttempt:
    """mark_indeterminate with its terminal guard inverted: an open attempt is returned
    unchanged, its state and the evidence why never recorded."""
    if not attempt.state.terminal:
        return attempt
    return RULE_BREAKS.unbroken(_indeterminate_only_when_terminal)(attempt, evidence, now)


_ABSENCE_AS_ACKNOWLEDGED = str(service_attempts.ACKNOWLEDGED_JOB_GONE)
"""Break `absence_claims_acknowledged_job`: the reason a lookup's absence leaves an
attempt without a provider job identity INDETERMINATE reads as the reason for one with
it, so the evidence says an acknowledged job was lost where none was acknowledged."""


def _running_rewritten(attempt: ServiceJobAttempt, progress_cursor: str | None,
                       now: datetime) -> ServiceJobAttempt:
    """A running report without its repeat test: an attempt already RUNNING at the
    reported progress is written again (a new version, as if something changed)."""
    if attempt.state is ServiceState.RUNNING and attempt.progress_cursor == progress_cursor:
        return attempt.model_copy(update={"version": attempt.version + 1, "updated_at": now})
    return RULE_BREAKS.unbroken(_running_rewritten)(attempt, progress_cursor, now)


async def _open_pass_first_page(ctx: ServiceContext, page: int = 100
                                ) -> list[ServiceJobAttempt]:
    """A pass over the open attempts that reconciles its first page and stops there."""
    seen: list[ServiceJobAttempt] = []
    for attempt in await ctx.store.open_attempts(None, page):
        try:
            seen.append(await service_attempts.reconcile(ctx, attempt.id))
        except ServicePayloadConflict:
            seen.append(attempt)
    return seen


def _digest_in_key_order(request: dict[str, Any], binding: Any,
                         destination: str | None) -> str:
    """The request digest over the request as serialised, keys in the order they came."""
    material = {"request": request, "binding": binding.model_dump(mode="json"),
                "destination": destination}
    blob = json.dumps(material, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _consistent_without_digest(self: ServiceJobAttempt) -> ServiceJobAttempt:
    """The attempt's self-check with the digest comparison left out (states only)."""
    if self.state in (ServiceState.ACCEPTED, ServiceState.RUNNING) and not self.provider_job_id:
        raise ValueError(f"{self.state} requires the provider job identity")
    if self.state is ServiceState.PREPARED and self.transmissions:
        raise ValueError("PREPARED proves no submit has started")
    return self

# -- seed 003 "Three boundaries", "Return makes a new claim" (runtime.stasis, issue M9) ---------


async def _hardware_best_effort(self: Waits, state: object, t: NeedHardware) -> object:
    """A hardware wait that, once the resume budget is spent, settles the Run DONE with
    what it has used so far instead of failing it."""
    budget = getattr(state, "hardware_resume_budget", None)
    if isinstance(budget, HardwareResumeBudget):
        try:
            budget.charge(t.capability)
        except HardwareBudgetExhausted:
            return Settlement(status=RunStatus.DONE,
                              result={"used": list(getattr(state, "used", [])),
                                      "calls": budget.total})
    return await RULE_BREAKS.unbroken(_hardware_best_effort)(self, state, t)


async def _refuse_unsuccessful_job(self: Waits, snap: NodeSnapshot) -> object:
    """A resume that takes only a SUCCEEDED agent job as its owner: a job that failed
    or was lost is refused, so the Pattern never sees (and reports) how it ended."""
    if snap.agent_job_id is not None:
        job = await self.ctx.deps.ledger.get_agent_job(snap.agent_job_id)
        if job is not None and job.status is not AgentJobStatus.SUCCEEDED:
            raise ResumeRefused(f"agent job {snap.agent_job_id} did not succeed")
    return await RULE_BREAKS.unbroken(_refuse_unsuccessful_job)(self, snap)


async def _verdict_last_writer_wins(
    self: MemoryLedger, consent_id: UUID, approve: bool, principal: str, now: datetime
) -> Consent | None:
    """A verdict written as an upsert: a later verdict on a decided consent replaces the
    first one instead of leaving it standing."""
    consent = self.consent_table.get(consent_id)
    if consent is None or not consent.status.decided:
        return await RULE_BREAKS.unbroken(_verdict_last_writer_wins)(
            self, consent_id, approve, principal, now)
    await enter()
    status = ConsentStatus.APPROVED if approve else ConsentStatus.DENIED
    decided = consent.model_copy(update={"status": status, "decided_by": principal,
                                         "decided_at": now})
    self.consent_table[consent_id] = decided
    return decided


async def _verdict_answered_as_asked(
    self: MemoryLedger, consent_id: UUID, approve: bool, principal: str, now: datetime
) -> Consent | None:
    """A verdict CAS that answers with the verdict asked for, not the row that stands: a
    verdict that lost the race to the contradicting one is answered as decided (the
    mutation tool's survivor `consent.py:43`, the loser test made `>`)."""
    decided = await RULE_BREAKS.unbroken(_verdict_answered_as_asked)(
        self, consent_id, approve, principal, now)
    if decided is None or not decided.status.decided:
        return decided
    return decided.model_copy(
        update={"status": ConsentStatus.APPROVED if approve else ConsentStatus.DENIED})


async def _verdict_left_to_relay(engine: RunEngine, run: Run) -> RunDelivery | None:
    """A verdict that is recorded but re-admits nothing: the Run waits for the relay's
    next pass (the relay and startup re-fire through their own reference)."""
    return None


def _subscribe_clamped(self: RunChannel, after_cursor: int = 0) -> Subscription:
    """A subscribe that clamps a cursor from the future to the current one instead of
    refusing it: the reader silently skips whatever it believed it had seen."""
    return RULE_BREAKS.unbroken(_subscribe_clamped)(self, min(after_cursor, self.cursor))


def _channel_from_cursor_one(self: RunChannel, run_id: UUID, snapshot: Any,
                             **bounds: Any) -> None:
    """A channel whose first event takes cursor 2 (the mutation tool's survivor
    `channel.py:108`, `self._cursor = 0` made 1): readers resuming from a cursor they
    were given are off by one from the replay."""
    RULE_BREAKS.unbroken(_channel_from_cursor_one)(self, run_id, snapshot, **bounds)
    self._cursor = 1


def _replay_window_short(self: RunChannel) -> tuple[int, int] | None:
    """A replay window that ends one event early (the mutation tool's survivor
    `channel.py:137`, `[-1]` made `[-2]`)."""
    if not self._replay:
        return None
    return self._replay[0].cursor, self._replay[-2 if len(self._replay) > 1 else -1].cursor


def _subscribe_reusing_keys(self: RunChannel, after_cursor: int = 0) -> Subscription:
    """Every reader registered under one key, so a later reader displaces an earlier one,
    which is offered nothing more (the mutation tool's survivor `channel.py:207`, `+ 1`
    made `* 1`)."""
    self._next_key = 0
    return RULE_BREAKS.unbroken(_subscribe_reusing_keys)(self, after_cursor)


async def _close_is_a_no_op(self: RunChannel, grace: float = 0.0) -> None:
    """A close that takes the channel for closed already: it neither drains nor cuts
    off its readers, and the bus drops the channel with them still attached (the
    mutation tool's survivor `channel.py:233`, `if self._closed` negated)."""
    return None


async def _close_without_grace(self: RunChannel, grace: float = 0.0) -> None:
    """A close that never waits for readers to drain the terminal event."""
    await RULE_BREAKS.unbroken(_close_without_grace)(self, 0.0)


def _remove_unsignalled(self: RunChannel, key: int) -> None:
    """A reader leaves without signalling the channel, so a close waiting for its
    readers waits out its grace after the last one left (the mutation tool's survivor
    `channel.py:222`, `is not None` made `is None`)."""
    self._subscribers.pop(key, None)


def _hurried_unless_barrier(self: StepWriter) -> bool:
    """A linger that a lone barrier does not end: the writer holds its group until the
    linger times out (the mutation tool's survivor `writer.py:271`, `> 0` made `> 1`)."""
    queued = len(self._queue)
    return (self._closing or self._waiters > 1 or self._repair is not None
            or queued >= GROUP_COMMIT_LIMIT or queued >= self._capacity)


def _hurried_only_at_a_full_group(self: StepWriter) -> bool:
    """A linger that a full group ends only as the queue reaches exactly the group limit:
    a writer back from a stalled append with more than a group queued holds them for
    its whole linger (the mutation tool's survivor `writer.py:272`, `>=` made `==`)."""
    queued = len(self._queue)
    return (self._closing or self._waiters > 0 or self._repair is not None
            or queued == GROUP_COMMIT_LIMIT or queued >= self._capacity)


def _restore_without_metadata(self: StepWriter, items: Sequence[tuple[str, dict[str, Any]]]
                              ) -> bool:
    """A writer that gives back the Steps of a settlement that did not apply with their
    metadata dropped: the kinds come back in order, each with empty data (caught by
    restored_steps_first; the mutation tool's survivors at `writer.py:458` garble the
    kind or the data the same way)."""
    return _ORIGINAL_RESTORE(self, [(kind, {}) for kind, _ in items])


_ORIGINAL_RESTORE = StepWriter.restore


def _discard_forgotten(self: EventBus, run_id: UUID, channel: RunChannel | None = None) -> None:
    """A bus that never forgets a channel: closed ones stay registered until the channel
    bound evicts them (the mutation tool's survivor `bus.py:77`, `current is not None`
    made `is None`; caught by closed_channel_discarded)."""
    return


async def _linger_not_at_all(self: StepWriter) -> None:
    """A group-committing writer that never holds a group: each append starts as soon
    as a Step is queued, however long its linger (caught by linger_holds)."""
    return


async def _linger_twenty_times(self: StepWriter) -> None:
    """A writer that holds a group twenty times its linger (the mutation tool's survivor
    `seams.py:520`, `step_linger_s` 0.05 made 1.05; caught by linger_bounded)."""
    if self._linger_s <= 0:
        return
    with anyio.move_on_after(self._linger_s * 20):
        while self._queue and not self._hurried():
            await self._work.wait()


async def _fold_without_waiting(self: HopEvents, settlement: Settlement) -> Any:
    """A settling hop that takes its writer's queued Steps without first waiting for the
    append in flight: beside one it settles alone at once, and its terminal Step
    trails the settlement through the writer (caught by settle_folds_steps)."""
    kind = TERMINAL_KINDS.get(settlement.status)
    if kind is None or self.channel is None or self.channel.closed:
        return None
    taken = self.writer.take_pending()
    if taken is None:
        return None
    self.channel.detach(self.writer)
    self.folded = True
    self._taken = taken
    return (kind, {"error": settlement.error}), taken


async def _terminal_unflushed(self: HopEvents, run: Run) -> None:
    """A hop that leaves an unfolded terminal Step queued instead of flushing it (the
    mutation tool's survivor `events/hop.py:160`, `if not self.folded` negated): the
    Step lands only as the writer closes, after the checkpoint cleanup, and is owed
    all the same (caught by terminal_flush_before_cleanup)."""
    self.track(run)
    self.debt = not self.folded
    published = await self.publish(TERMINAL_KINDS[run.status], {"error": run.error})
    if self.folded:
        self.debt = not (await self._flush() and published)
    await self.bus.close(run.id)


async def _publish_always_accepted(self: HopEvents, kind: str,
                                   data: Any = None) -> bool:
    """A hop that counts a publish refused or cut off at its bound as accepted (the
    mutation tool's survivor `events/hop.py:110`, the final `return False` made True):
    a terminal event that never reached the writer owes nothing, so the hop settles
    without its terminal Step and records no debt (caught by settled_hop_owes_evidence)."""
    if self.channel is None:
        return False
    with anyio.move_on_after(PUBLISH_BOUND_S, shield=True):
        with contextlib.suppress(EventError):
            await self.channel.publish(kind, data)
    return True


async def _publish_unshielded(self: HopEvents, kind: str, data: Any = None) -> bool:
    """A hop whose bounded publish is not shielded (the mutation tool's survivor
    `events/hop.py:101`, `shield=True` made False): a cancellation arriving while the
    final node's node.completed publish waits (a graceful shutdown) ends the hop before
    the node's outcome is settled (caught by cancelled_hop_keeps_outcome)."""
    if self.channel is None:
        return False
    with anyio.move_on_after(PUBLISH_BOUND_S):
        with contextlib.suppress(EventError):
            await self.channel.publish(kind, data)
            return True
    return False


async def _fold_after_flush(self: HopEvents, settlement: Settlement) -> Any:
    """A settling hop that flushes a lingering writer before folding (the mutation tool's
    survivor `events/hop.py:126`, `if self.writer.lingers` negated): the Steps the writer
    held are written in their own transaction, and only the terminal Step rides in the
    settlement (caught by settle_folds_steps)."""
    if (TERMINAL_KINDS.get(settlement.status) is not None and self.channel is not None
            and not self.channel.closed and self.writer.lingers):
        with anyio.move_on_after(1.0), contextlib.suppress(StepWriteFailed, StepWriterClosed):
            await self.writer.barrier()
    return await RULE_BREAKS.unbroken(_fold_after_flush)(self, settlement)


def _backoff_flat(failures: int) -> float:
    """A supervisor whose backoff forgets to double: every restart waits the base delay
    (caught by relay_restarted_on_backoff from the second failure of a boot's relay)."""
    return supervisor_module.BACKOFF_BASE_S


async def _supervise_once(name: str, relay: Callable[[], Awaitable[None]],
                          on_restart: Callable[[str, int], None] | None = None) -> None:
    """A supervisor that runs its relay once: a relay that exits stays dead until
    shutdown (caught by relay_restarted_on_backoff: the restart never comes)."""
    with contextlib.suppress(Exception):
        await relay()
    await anyio.sleep_forever()


def _subscription_born_cut_off(self: Subscription, channel: RunChannel, key: int,
                               after_cursor: int) -> None:
    """Every reader starts reported cut off (the mutation tool's survivor
    `channel.py:263`, `self._cut_off = False` made True)."""
    RULE_BREAKS.unbroken(_subscription_born_cut_off)(self, channel, key, after_cursor)
    self._cut_off = True


def _boundary_two_before_terminal(self: Subscription) -> Event:
    """A resync taken after the terminal event lands two cursors before it, not one (the
    mutation tool's survivor `channel.py:339`, `terminal.cursor - 1` made `- 2`)."""
    event = RULE_BREAKS.unbroken(_boundary_two_before_terminal)(self)
    if self._channel._terminal is None:
        return event
    self._last = event.cursor - 1
    return event.model_copy(update={"cursor": event.cursor - 1})


def _take_one(self: StepWriter) -> list[Any]:
    """A group take that never goes past its first Step: one append per Step on a ledger
    that could write them together (the mutation tool's survivor `writer.py:303`,
    `len(group) < GROUP_COMMIT_LIMIT` made `>`)."""
    return [self._queue.popleft()]


def _failed_needs_provider_job(attempt: ServiceJobAttempt, outcome: ServiceOutcome,
                               evidence: Evidence) -> bool:
    """Settlement that takes FAILED only from a provider's own report: a proved rejection
    (no provider job) is refused, and the attempt is left to be re-driven."""
    if outcome.state is ServiceState.FAILED and evidence.kind is EvidenceKind.SUBMIT_REJECTED:
        return False
    return bool(RULE_BREAKS.unbroken(_failed_needs_provider_job)(attempt, outcome, evidence))


def _replay_refused_with_job(attempt: ServiceJobAttempt, proof: Evidence,
                             now: datetime) -> ServiceJobAttempt:
    """A re-submit decision whose acknowledged-job guard tests the wrong proof kind: it
    refuses a same-key replay once a provider job is known (and lets proof of no effect
    through), as the surviving mutant of `decide_begin_resubmit` did."""
    if proof.kind is EvidenceKind.SAME_KEY_REPLAY and attempt.provider_job_id is not None \
            and attempt.state in (ServiceState.SUBMITTING, ServiceState.INDETERMINATE) \
            and attempt.cancel_requested_at is None \
            and proof.transmission == attempt.transmissions:
        raise ResubmitRefused(attempt.id, "a provider job was acknowledged")
    return RULE_BREAKS.unbroken(_replay_refused_with_job)(attempt, proof, now)


def _lookup_cancels_prepared(attempt: ServiceJobAttempt, outcome: ServiceOutcome,
                             evidence: Evidence) -> bool:
    """Settlement that takes a lookup as proof that a PREPARED attempt was never sent: the
    client's cancel-settle of the attempt it just prepared is accepted (bad_input)."""
    if (outcome.state is ServiceState.CANCELLED and attempt.state is ServiceState.PREPARED
            and evidence.kind is EvidenceKind.LOOKUP_FOUND):
        return True
    return bool(RULE_BREAKS.unbroken(_lookup_cancels_prepared)(attempt, outcome, evidence))


def _absent_lookup_succeeds(attempt: ServiceJobAttempt, outcome: ServiceOutcome,
                            evidence: Evidence) -> bool:
    """Settlement that takes a lookup finding no job as proof of success for an
    acknowledged attempt: the client's forged SUCCEEDED is accepted (bad_input)."""
    if (outcome.state is ServiceState.SUCCEEDED and attempt.provider_job_id is not None
            and attempt.state in (ServiceState.ACCEPTED, ServiceState.RUNNING,
                                  ServiceState.INDETERMINATE)
            and evidence.kind is EvidenceKind.LOOKUP_ABSENT):
        return True
    return bool(RULE_BREAKS.unbroken(_absent_lookup_succeeds)(attempt, outcome, evidence))


async def _pin_falls_back_to_latest(self: Worker, run: Run, *args: Any) -> None:
    """A worker that runs the latest version it holds when the pinned one is missing
    (a rolling upgrade's Run pinned one version up): the Run ends DONE under a
    Pattern version it was never admitted for (caught by unregistered_pin_fails)."""
    if self.registry.pinned(run.pattern, run.pattern_version) is None:
        latest = self.registry.latest(run.pattern)
        run = run.model_copy(update={"pattern_version": latest.version})
    await RULE_BREAKS.unbroken(_pin_falls_back_to_latest)(self, run, *args)


async def _lapse_only_when_told(self: BootLeaseKeeper) -> bool:
    """Lease renewal that believes the registry's answer: a renewal that returned a
    whole lease after the previous one began (it may have committed after the lease ran
    out) is not counted as a lapse (caught by lease_lapse_reported in two_vessels)."""
    now = self.deps.clock.now()
    self.renewing_since = now
    try:
        live = await self.deps.ledger.renew_boot(self.deps.boot_id, self.lease_s, now)
    except Exception:
        self.steady_since = None
        raise
    finally:
        self.renewing_since = None
    done = self.deps.clock.now()
    self.renewed_at = now
    if not live or done - now >= timedelta(seconds=self.slow_s) or self.steady_since is None:
        self.steady_since = done
    if not live:
        self.lapses += 1
    return bool(live)


RULE_BREAKS = BreakTable({
    "lapse_only_when_told": (BootLeaseKeeper, "renew_once", _lapse_only_when_told),
    "pin_falls_back_to_latest": (Worker, "_execute", _pin_falls_back_to_latest),
    "settle_without_claim": (MemoryLedger, "settle_run", _settle_without_claim),
    "started_at_rewritten": (MemoryLedger, "claim_delivery", _claim_restamps_started_at),
    "doctrine_priority": (RunDelivery, "broker_priority", property(_doctrine_priority)),
    "fingerprint_ignores_priority": (Intent, "fingerprint", _fingerprint_without_priority),
    "fingerprint_key_order": (Intent, "fingerprint", _fingerprint_in_key_order),
    "no_session_fence": (RunEngine, "_fence_session", _no_session_fence),
    "session_fence_before_replay": (RunEngine, "submit", _fence_before_replay),
    "session_fence_in_process": (MemoryLedger, "_session_busy", _session_never_busy),
    "published_without_job": (RunEngine, "publish", _publish_marks_on_failure),
    "submit_leaves_publish_to_relay": (RunEngine, "publish", _publish_unless_submitting),
    "replay_answers_created": (RunEngine, "_replay", _replay_answers_created),
    "invalid_intent_unreported": (engine_module, "validated_intent", _validated_unreported),
    "admission_locks_kept": (KeyedLocks, "hold", _hold_never_dropped),
    "admission_key_unlocked": (AdmissionCoordinator, "admitting", _admitting_without_key_lock),
    "sessionless_fenced": (RunEngine, "_fence_session", _fence_sessionless_too),
    "held_without_owner": (RunEngine, "_records", _records_without_holder),
    "keyed_run_unscoped": (RunEngine, "_records", _records_unscoped),
    "admission_pins_oldest": (WorkflowRegistry, "latest", _oldest_version),
    "retention_refused_after_release": (RunEngine, "_still_admitted",
                                        staticmethod(_refuse_unless_failed)),
    "conflict_without_key": (engine_module, "IdempotencyConflict", _conflict_without_key),
    "closed_delivery_reopened": (MemoryLedger, "mark_published", _mark_published_any_state),
    "rotation_reuses_key": (DeliveryRecovery, "_rotate", _rotate_publishes_old_key),
    "readmit_without_cas": (MemoryLedger, "readmit_after_consent", _readmit_consent_without_cas),
    "hardware_budget_reset": (HardwareResumeBudget, "charge", _budget_reset),
    "evidence_repaired_twice": (debts, "repair_terminal_evidence", _repair_always),
    "orphan_own_boot": (Relays, "_orphan", _relay_orphans_own_boot),
    "parent_not_fenced": (Canceller, "contain", _contain_children_only),
    "fence_only_aborting": (Canceller, "_fence_parent", _fence_only_aborting),
    "agent_refusal_raises": (Canceller, "_contain_agent_jobs", _agent_refusal_raises),
    "agent_sweep_stops_at_settled": (Canceller, "_contain_agent_jobs",
                                     _agent_sweep_stops_at_settled),
    "attempt_sweep_stops_at_settled": (Canceller, "_contain_service_attempts",
                                       _attempt_sweep_stops_at_settled),
    "fence_gives_up_on_lost_ack": (Canceller, "_fence_parent", _fence_gives_up_on_lost_ack),
    "children_without_consents": (Canceller, "contain_children", _children_without_consents),
    "attempt_budget_ignored": (job_rules, "_spent_reason", _attempts_unbounded),
    "usage_zero_when_unknown": (job_rules, "_event", _usage_zero_when_unknown),
    "attempt_index_from_one": (MemoryJobStore, "_next_event", _next_event_from_one),
    "attempt_event_unvalidated": (job_rules, "AttemptEvent", _attempt_event_unchecked),
    "interpretation_from_zero": (job_models, "AttemptEvent", _AttemptEventFromZero),
    "retry_base_negative": (job_models, "JobPolicy", _JobPolicyNegativeBase),
    "withdraw_numbered_from_start": (job_rules, "decide_withdraw", _withdraw_numbered_from_start),
    "evidence_workspace_unchecked": (EvidenceRecord, "model_validate_json",
                                     _evidence_json_unchecked),
    "attempt_decode_keyerror": (ServiceJobAttempt, "model_validate", _attempt_decode_raw),
    "payload_change_accepted": (service_rules, "decide_prepare", _prepare_ignores_payload),
    "cancel_intent_dropped": (service_rules, "decide_request_cancel", _cancel_intent_dropped),
    "rejection_not_settled": (service_rules, "_settle_allowed", _failed_needs_provider_job),
    "replay_refused_with_job": (service_rules, "decide_begin_resubmit",
                                _replay_refused_with_job),
    "lookup_cancels_prepared": (service_rules, "_settle_allowed", _lookup_cancels_prepared),
    "absent_lookup_succeeds": (service_rules, "_settle_allowed", _absent_lookup_succeeds),
    "proof_never_resubmits": (service_attempts, "_absent", _absent_never_resubmits),
    "open_pass_first_page": (service_attempts, "reconcile_open", _open_pass_first_page),
    "cancel_ignores_no_effect": (service_attempts, "_absent", _absent_never_cancels),
    "indeterminate_not_recorded": (service_rules, "decide_indeterminate",
                                   _indeterminate_only_when_terminal),
    "absence_claims_acknowledged_job": (service_attempts, "ABSENCE_NOT_PROOF",
                                        _ABSENCE_AS_ACKNOWLEDGED),
    "running_report_rewritten": (service_rules, "decide_running", _running_rewritten),
    "fresh_prepare_refused": (service_rules, "decide_prepare", _prepare_refuses_new_keys),
    "attempt_digest_unchecked": (ServiceJobAttempt, "consistent", _consistent_without_digest),
    "digest_follows_key_order": (service_models, "request_digest", _digest_in_key_order),
    "retention_after_release": (RunEngine, "_retain_and_release", _release_before_retention),
    "relay_never_republishes": (DeliveryRecovery, "recover", _relay_never_republishes),
    "cancel_reopens_terminal": (MemoryLedger, "begin_cancel", _cancel_over_terminal),
    "readmit_same_sequence": (MemoryLedger, "_readmit", _readmit_same_sequence),
    "call_not_reserved": (MemoryJobStore, "reserve_model_call", _reserve_in_memory_only),
    "refusal_always_lease_expired": (job_rules, "refusal_error", _every_refusal_lease_expired),
    "renewal_ignored": (job_rules, "decide_renew", _renewal_ignored),
    "size_check_skipped": (jobs_worker._Attempt, "run", _attempt_without_size_check),
    "reprocess_keeps_budgets": (job_rules, "decide_reprocess", _reprocess_keeps_budgets),
    "model_version_unchecked": (jobs_worker._Attempt, "run", _attempt_any_model_version),
    "malformed_output_staged": (jobs_worker, "read_bundle", _lenient_bundle),
    "invalid_output_retried": (jobs_worker._Attempt, "_stage", _invalid_output_retried),
    "invalid_output_abandoned": (jobs_worker._Attempt, "_stage", _invalid_output_abandoned),
    "evidence_digest_of_prefix": (job_models, "digest_text", _digest_of_prefix),
    "refused_usage_relabelled": (job_rules, "interpretation_of", _interpretation_now),
    "receipt_refuses_repeats": (job_rules, "decide_receive", _receipt_refuses_repeats),
    "receipt_takes_newer_version": (job_rules, "decide_receive", _receipt_takes_newer_version),
    "retry_backoff_doubled": (JobPolicy, "retry_delay", _backoff_from_this_attempt),
    "retry_backoff_halved": (JobPolicy, "retry_delay", _backoff_halved),
    "claim_half_lease": (job_rules, "decide_claim", _claim_half_lease),
    "repeat_closing_refused": (job_rules, "check_lease", _lease_check_without_repeats),
    "slow_reader_loses_events": (Subscription, "_offer", _offer_drops_silently),
    "reader_queue_one_short": (Subscription, "_offer", _offer_resyncs_one_short),
    "future_cursor_clamped": (RunChannel, "subscribe", _subscribe_clamped),
    "first_cursor_two": (RunChannel, "__init__", _channel_from_cursor_one),
    "replay_window_short": (RunChannel, "replay_window", property(_replay_window_short)),
    "reader_keys_reused": (RunChannel, "subscribe", _subscribe_reusing_keys),
    "close_without_grace": (RunChannel, "close", _close_without_grace),
    "close_is_a_no_op": (RunChannel, "close", _close_is_a_no_op),
    "reader_leaves_unsignalled": (RunChannel, "_remove", _remove_unsignalled),
    "group_of_one": (StepWriter, "_take_group", _take_one),
    "reader_born_cut_off": (Subscription, "__init__", _subscription_born_cut_off),
    "boundary_two_before_terminal": (Subscription, "_boundary", _boundary_two_before_terminal),
    "barrier_left_lingering": (StepWriter, "_hurried", _hurried_unless_barrier),
    "writer_never_lingers": (StepWriter, "_linger", _linger_not_at_all),
    "writer_lingers_long": (StepWriter, "_linger", _linger_twenty_times),
    "full_group_left_lingering": (StepWriter, "_hurried", _hurried_only_at_a_full_group),
    "restore_without_metadata": (StepWriter, "restore", _restore_without_metadata),
    "channel_never_discarded": (EventBus, "discard", _discard_forgotten),
    "relay_backoff_flat": (supervisor_module, "backoff", _backoff_flat),
    "relay_left_dead": (lifespan_module, "supervise", _supervise_once),
    "fold_without_waiting": (HopEvents, "fold_terminal", _fold_without_waiting),
    "fold_after_flush": (HopEvents, "fold_terminal", _fold_after_flush),
    "terminal_left_unflushed": (HopEvents, "terminal", _terminal_unflushed),
    "refused_publish_accepted": (HopEvents, "publish", _publish_always_accepted),
    "publish_unshielded": (HopEvents, "publish", _publish_unshielded),
    "delegate_resumed_unfinished": (Relays, "_delegate", _relay_readmits_running_delegate),
    "service_resumed_unfinished": (Relays, "_service", _relay_readmits_open_attempt),
    "chain_limit_four_rounds": (waits_module, "MAX_CONSENT_ROUNDS", 4),
    "hardware_best_effort": (Waits, "hardware", _hardware_best_effort),
    "resume_refuses_failed_job": (Waits, "context_for", _refuse_unsuccessful_job),
    "verdict_left_to_relay": (consent_module, "refire_consent", _verdict_left_to_relay),
    "verdict_last_writer_wins": (MemoryLedger, "decide_consent", _verdict_last_writer_wins),
    "verdict_answered_as_asked": (MemoryLedger, "decide_consent", _verdict_answered_as_asked),
}, companions={
    "no_session_fence": [(MemoryLedger, "_session_busy", _session_never_busy)],
    "evidence_repaired_twice": [(MemoryLedger, "evidence_debts", _every_terminal_run)],
    "delegate_resumed_unfinished": [
        (MemoryLedger, "readmit_after_delegate", _readmit_delegate_any_state),
    ],
    "service_resumed_unfinished": [
        (MemoryLedger, "readmit_after_service", _readmit_service_any_state),
    ],
})
"""One break per seed rule; `companions` are the further patches a break needs when the
rule is guarded twice (caller and CAS): one bug, written in both places, as a
maintainer who misreads the rule would."""

