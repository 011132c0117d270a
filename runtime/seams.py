"""The seams through which the runtime sees its world (DESIGN section 2).

Everything nondeterministic reaches the runtime through one of these
protocols, gathered in `Deps`. Production implementations live in
`runtime.adapters` (system clock, PostgreSQL ledger, SAQ broker); the
simulator supplies its own. Runtime core code never reads the wall clock,
generates random ids, or touches storage except through a seam.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from runtime.models import (
    Admission,
    AgentJob,
    AgentJobStatus,
    CheckpointRecord,
    Claim,
    Consent,
    LedgerDump,
    Run,
    RunDelivery,
    RunStatus,
    Settlement,
    Step,
)

if TYPE_CHECKING:  # the service package builds on these seams; only its type is needed here
    from runtime.service.attempts import ServiceContext


class Clock(Protocol):
    """Time as the runtime may know it."""

    def now(self) -> datetime:
        """Aware UTC wall time."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...


class Entropy(Protocol):
    """Ids and jitter."""

    def new_id(self) -> UUID: ...

    def random(self) -> float:
        """Uniform in [0, 1)."""
        ...


class FaultPoints(Protocol):
    """Named crash windows (runtime.faults). Production: a no-op."""

    async def point(self, name: str, **context: Any) -> None: ...


class Ledger(Protocol):
    """Durable records. Each method is exactly one transaction: all or nothing.

    Conditional methods never raise for a lost race: they return what the
    ledger holds so the caller can classify it.
    """

    async def admit_run(
        self, run: Run, delivery: RunDelivery, *, fence_session: bool = True
    ) -> Admission:
        """Create Run plus its delivery once; on id conflict return the existing pair.

        With `fence_session`, a Run with a Bridge session is refused (nothing
        written, `Admission.busy` set) while another Run of that session is
        nonterminal: the ledger decides it in the admitting transaction, so the
        fence holds across processes (issue 15, M11). Only tests that build
        legacy states turn it off."""
        ...

    async def get_run(self, run_id: UUID) -> Run | None: ...

    async def get_delivery(self, run_id: UUID, seq: int) -> RunDelivery | None: ...

    async def deliveries(self, run_id: UUID) -> list[RunDelivery]:
        """Every delivery of a Run, by sequence."""
        ...

    async def release_held(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        """HELD -> PENDING for that exact generation; otherwise return it unchanged."""
        ...

    async def fail_held(
        self, run_id: UUID, seq: int, reason: str, now: datetime
    ) -> RunDelivery | None:
        """Settle only a still-HELD generation: delivery FAILED, Run FAILED.

        Returns the delivery as the ledger holds it afterwards.
        """
        ...

    async def mark_published(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        """PENDING -> PUBLISHED on broker acknowledgement; a later state is kept.

        Only while the Run is QUEUED at exactly `seq`: once its cancellation
        began (CANCELLING freezes the generation) the delivery is returned
        still PENDING, and the publisher fences the job that may have landed
        behind the canceller's probe (runtime.publish_fence).
        """
        ...

    async def claim_delivery(
        self, run_id: UUID, seq: int, boot_id: str, token: str, now: datetime
    ) -> Claim:
        """QUEUED Run at exactly `seq` -> RUNNING, its delivery -> CLAIMED.

        `started_at` is set on the first successful claim only. Repeating the
        call with the same `token` after an ambiguous commit reports the claim
        again; any other caller gets `claimed=False`.
        """
        ...

    async def settle_run(
        self,
        run_id: UUID,
        seq: int,
        settlement: Settlement,
        now: datetime,
        step: tuple[str, dict[str, Any]] | None = None,
        before: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> Run | None:
        """Terminal truth, fenced by the claimed sequence; None when fenced out.

        Repeating an identical settlement of the same sequence returns the Run.
        With `step` (the kind and data of a terminal Step: run.done, run.failed,
        run.cancelled) the same transaction also appends it at the Run's next
        index, unless the Run has a terminal Step already: terminal truth and its
        evidence commit together, whenever the Run is returned (issue 17).
        `before` are the hop's lifecycle Steps its writer had not written yet:
        they take the indexes ahead of `step`, all or none with it. A
        non-terminal `step`, a terminal kind in `before`, or `before` without
        `step` is refused (ValueError) before anything is written
        (runtime.adapters.settle_rule).
        """
        ...

    async def rotate_delivery(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        """Close a QUEUED Run's dead delivery `seq` and create `seq + 1` PENDING.

        Keeps the fresh/resume mode. None when `seq` is no longer current.
        """
        ...

    async def fail_orphan(
        self, run_id: UUID, seq: int, boot_id: str, reason: str, now: datetime
    ) -> Run | None:
        """FAILED for a Run still RUNNING at `seq` under a claim of another boot."""
        ...

    async def fail_abandoned(
        self, run_id: UUID, seq: int, claim_token: str, reason: str, now: datetime
    ) -> Run | None:
        """FAILED for a Run still RUNNING or AWAITING_HARDWARE at `seq` whose delivery
        is CLAIMED under exactly `claim_token` (a hop of this boot that is gone).

        The delivery closes FAILED in the same commit. Repeating the same failure
        returns the Run; any other claim, sequence or state returns None.
        """
        ...

    # -- boot registry (issue 15, M11: several Vessels on one database) --------

    async def register_boot(self, boot_id: str, lease_s: float, now: datetime) -> None:
        """Record this boot with a lease of `lease_s` seconds (a repeat renews it)."""
        ...

    async def renew_boot(self, boot_id: str, lease_s: float, now: datetime) -> bool:
        """Extend the boot's lease to `lease_s` seconds from now; True when the
        lease had not yet expired (False: others may already have fenced its work)."""
        ...

    async def boot_alive(self, boot_id: str, now: datetime) -> bool:
        """True while the boot is registered and its lease has not expired. An
        unregistered boot is dead: every boot registers before it claims. A
        database ledger measures leases by the database's clock, not `now`."""
        ...

    async def runs_in_session(self, session: str, limit: int) -> list[Run]:
        """Nonterminal Runs of a Bridge session (bounded)."""
        ...

    async def page_runs(
        self,
        statuses: Sequence[RunStatus],
        after: tuple[datetime, UUID] | None,
        limit: int,
    ) -> list[Run]:
        """Runs in `statuses` ordered by (updated_at, id), strictly after the cursor."""
        ...

    async def append_step(
        self, run_id: UUID, seq: int, kind: str, data: dict[str, Any], now: datetime
    ) -> Step:
        """Append one Step at the Run's next index. A Run takes one terminal Step
        (run.done, run.failed, run.cancelled) at most, whoever writes it: when one
        is already written, a terminal append writes nothing and returns that one
        (several boots may fail the same orphan; issue 15, M11). The check and
        the write are one transaction, atomic across processes. A Step names an
        admitted Run: LookupError, and nothing written, when no such Run exists."""
        ...

    async def append_steps(
        self, run_id: UUID, seq: int, items: Sequence[tuple[str, dict[str, Any]]], now: datetime
    ) -> list[Step]:
        """Append `items` (kind, data) in order as consecutive Steps, all or none,
        in one transaction: the Step writer's group commit. No items, no write.
        A terminal item the Run may no longer take (one is written, or the group
        has an earlier one) is dropped; the Steps returned are those written.
        LookupError, and nothing written, when no such Run exists."""
        ...

    async def steps(self, run_id: UUID) -> list[Step]: ...

    # -- checkpoints (seed 003, "What crosses the threshold") ------------------

    async def save_checkpoint(self, record: CheckpointRecord) -> bool:
        """Replace the Run's one document; only while the Run is RUNNING or
        AWAITING_HARDWARE at `record.seq` (an old hop cannot overwrite)."""
        ...

    async def load_checkpoint(self, run_id: UUID) -> CheckpointRecord | None: ...

    async def delete_checkpoint(self, run_id: UUID) -> bool:
        """Idempotent; only a terminal Run's checkpoint is deleted."""
        ...

    async def checkpoint_debts(self, limit: int, after: UUID | None = None) -> list[UUID]:
        """Terminal Runs that still hold a checkpoint (cleanup owed), by Run id,
        strictly after `after`, at most `limit` of them: what startup and the
        relay retry deleting. Reads only checkpoints, never terminal history."""
        ...

    # -- startup debts (issue 15: startup in O(work still open)) ---------------

    async def evidence_debts(self, after: tuple[datetime, UUID] | None, limit: int) -> list[Run]:
        """Terminal Runs without a terminal Step (evidence owed), ordered by
        (updated_at, id) strictly after the cursor. A Run leaves this set in
        the transaction of `append_step` of a terminal kind (run.done,
        run.failed, run.cancelled), so the read never grows with history."""
        ...

    async def late_fence_debts(
        self, after: tuple[datetime, UUID] | None, limit: int
    ) -> list[Run]:
        """CANCELLED Runs whose late hop job startup has not yet probed, ordered
        by (updated_at, id) strictly after the cursor. `finish_cancel` records
        the debt in the transaction that exposes CANCELLED."""
        ...

    async def settle_late_fence(self, run_id: UUID) -> bool:
        """Clear the late-fence debt of a CANCELLED Run; False when none was owed."""
        ...

    # -- consent (seed 000, "Events, settlement, and waits") -------------------

    async def create_consent(self, consent: Consent) -> Consent | None:
        """Insert once (a repeat returns the stored row); fenced like a checkpoint."""
        ...

    async def get_consent(self, consent_id: UUID) -> Consent | None: ...

    async def consents_of(self, run_id: UUID) -> list[Consent]:
        """A Run's consents, oldest first."""
        ...

    async def park_consent(
        self, run_id: UUID, seq: int, consent_id: UUID, now: datetime
    ) -> Run | None:
        """Verify checkpoint and consent bind this Run, then RUNNING -> AWAITING_CONSENT
        with `consent_id` and settle the claimed delivery, in one transaction."""
        ...

    async def decide_consent(
        self, consent_id: UUID, approve: bool, principal: str, now: datetime
    ) -> Consent | None:
        """PENDING -> APPROVED | DENIED; a decided or cancelled consent is returned as is."""
        ...

    async def cancel_consent(self, consent_id: UUID, now: datetime) -> Consent | None:
        """PENDING -> CANCELLED; anything else returned as is."""
        ...

    async def readmit_after_consent(
        self, run_id: UUID, consent_id: UUID, now: datetime
    ) -> RunDelivery | None:
        """The owner CAS: AWAITING_CONSENT on exactly this decided, non-cancelled
        consent -> QUEUED with a fresh PENDING resume delivery at seq + 1."""
        ...

    # -- delegation (seed 000, "Delegated AgentJob labor") -------------------

    async def create_agent_job(self, job: AgentJob) -> AgentJob | None: ...

    async def get_agent_job(self, job_id: UUID) -> AgentJob | None: ...

    async def agent_jobs_of(self, run_id: UUID) -> list[AgentJob]: ...

    async def record_agent_job(
        self,
        job_id: UUID,
        status: AgentJobStatus,
        result: dict[str, Any] | None,
        now: datetime,
    ) -> AgentJob | None:
        """Record what the agent runtime reported; terminal truth is kept
        (only LOST may still become CANCELLED after containment)."""
        ...

    async def park_delegate(
        self, run_id: UUID, seq: int, job_id: UUID, now: datetime
    ) -> Run | None: ...

    async def readmit_after_delegate(
        self, run_id: UUID, job_id: UUID, now: datetime
    ) -> RunDelivery | None:
        """The owner CAS for a terminal job owning the current wait."""
        ...

    # -- service waits (seed 000, "Service job attempts") ----------------------

    async def park_service(
        self, run_id: UUID, seq: int, attempt_id: UUID, now: datetime
    ) -> Run | None:
        """RUNNING at `seq` -> AWAITING_SERVICE, only when the checkpoint binds
        `attempt_id` and that attempt exists and is owned by this Run; the
        claimed delivery settles in the same transaction."""
        ...

    async def readmit_after_service(
        self, run_id: UUID, attempt_id: UUID, now: datetime
    ) -> RunDelivery | None:
        """The owner CAS: AWAITING_SERVICE on exactly this attempt, which is
        terminal and owned by the Run -> QUEUED with a fresh resume delivery."""
        ...

    # -- hardware stasis (seed 003, "Three boundaries") -------------------------

    async def await_hardware(self, run_id: UUID, seq: int, now: datetime) -> Run | None: ...

    async def resume_hardware(self, run_id: UUID, seq: int, now: datetime) -> Run | None: ...

    # -- cancellation (seed 000, "Cancellation, mutation, and recovery") -------

    async def begin_cancel(self, run_id: UUID, now: datetime) -> Run | None:
        """Nonterminal -> CANCELLING, freezing its delivery generation; a
        terminal or already CANCELLING Run is returned as is."""
        ...

    async def finish_cancel(self, run_id: UUID, seq: int, now: datetime) -> Run | None:
        """CANCELLING at `seq` -> CANCELLED, closing that delivery and any
        pending consent; None when the Run is elsewhere."""
        ...

    async def dump(self) -> LedgerDump:
        """Everything, ordered by (created_at, id) and sequence: for checkers, not hot paths."""
        ...


class JobStatus(enum.StrEnum):
    """SAQ's job statuses, as the broker reports them."""

    NEW = "new"
    DEFERRED = "deferred"
    QUEUED = "queued"
    ACTIVE = "active"
    ABORTING = "aborting"
    ABORTED = "aborted"
    FAILED = "failed"
    COMPLETE = "complete"

    @property
    def live(self) -> bool:
        """Queued or running: the broker still owns the hop."""
        return self in (JobStatus.NEW, JobStatus.DEFERRED, JobStatus.QUEUED, JobStatus.ACTIVE,
                        JobStatus.ABORTING)

    @property
    def finished(self) -> bool:
        return self in (JobStatus.ABORTED, JobStatus.FAILED, JobStatus.COMPLETE)


class JobInfo(BaseModel):
    """What a probe by key observes of one broker job."""

    model_config = ConfigDict(frozen=True)

    key: str
    queue: str
    status: JobStatus
    priority: int
    run_id: UUID
    seq: int
    started_at: float | None = None
    touched_at: float | None = None
    error: str | None = None
    boot_id: str | None = None
    """The boot whose worker dequeued the job, stamped in the dequeue's own
    write (issue 15, M11): None while it waits queued, or for a job taken by a
    worker that stamps nothing. Recovery tells a live peer's freshly dequeued
    job from a dead boot's stranded one by it."""


HopHandler = Callable[[UUID, int], Awaitable[object]]
"""A lane's handler: perform the hop `(run_id, seq)`."""


class Broker(Protocol):
    """The delivery broker: SAQ's observable semantics."""

    async def publish(
        self, queue: str, key: str, *, run_id: UUID, seq: int, priority: int, heartbeat: int
    ) -> bool:
        """Enqueue a hop under `key` with broker `priority` (lower first).

        True when a job was created; False when the key is already queued,
        active or aborting (deduplicated). Raises BrokerUnavailable on failure.
        """
        ...

    async def probe(self, key: str) -> JobInfo | None: ...

    async def abort(self, key: str, reason: str) -> JobInfo | None:
        """Request abort; returns the job as observed right after the request."""
        ...

    async def touch(self, key: str) -> None:
        """Refresh the heartbeat of a running job."""
        ...

    async def retire(self, key: str, reason: str) -> JobInfo | None:
        """End a job whose worker is known dead as ABORTED now, with `reason`.

        For recovery only, once the job's `boot_id` names a boot whose lease
        lapsed: nobody will ever finish its active or aborting job, so waiting
        for the broker's heartbeat sweep would only delay the Run (issue 15,
        M11). A queued job is aborted as `abort` does; a finished one is left
        as it is. Returns the job as observed after the call."""
        ...

    async def serve(
        self, queue: str, handler: HopHandler, concurrency: int, *, boot_id: str | None = None
    ) -> None:
        """Consume `queue` until cancelled, at most `concurrency` hops at once;
        every job dequeued is stamped with `boot_id` (JobInfo.boot_id)."""
        ...


class EffectSink(Protocol):
    """An external system that honours idempotency identities."""

    async def apply(self, identity: str, run_id: UUID, seq: int, payload: dict[str, Any]) -> bool:
        """Apply once per identity; True when this call applied it."""
        ...


class AgentJobReport(BaseModel):
    """What the agent runtime says of one job, looked up by its durable identity."""

    model_config = ConfigDict(frozen=True)

    status: AgentJobStatus
    result: dict[str, Any] | None = None


class AgentRuntime(Protocol):
    """Delegated labour (seed 000, "Delegated AgentJob labor")."""

    async def submit(self, job: AgentJob) -> None:
        """Idempotent by `job.id`: a known job is adopted, never started twice."""
        ...

    async def lookup(self, job_id: UUID) -> AgentJobReport | None:
        """None when the runtime does not know the job."""
        ...

    async def cancel(self, job_id: UUID) -> bool:
        """Contain the job; True only when the runtime acknowledges it stopped."""
        ...


class Orchestrator(Protocol):
    """Owner of hardware readiness (seed 003)."""

    async def converge(self, run_id: UUID, capability: str) -> None:
        """Return once `capability` is ready; raise when it cannot be."""
        ...


@dataclass(frozen=True)
class Deps:
    """The world of one process incarnation, passed to every component."""

    clock: Clock
    entropy: Entropy
    ledger: Ledger
    broker: Broker
    faults: FaultPoints
    effects: EffectSink
    boot_id: str
    agents: AgentRuntime | None = None
    orchestrator: Orchestrator | None = None
    services: ServiceContext | None = None
    """Where AWAITING_SERVICE parks send their ServiceJobAttempt@1 records."""
    step_linger_s: float = 0.05
    """How long a hop's Step writer holds an append nobody waits for, so that a
    hop shorter than this settles with its lifecycle Steps (issue 17); 0 writes
    each group at once, as every hop longer than the linger meets it anyway."""
