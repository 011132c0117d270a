"""The decisions of every JobStore transaction, as pure functions.

Both stores (memory and PostgreSQL) read the rows a transaction needs, call
one `decide_*` function, write what the returned `Decision` says, and then
raise its `error` if it carries one. Keeping the rules here is what makes the
two stores answer identically (seed 004_85033eb8fc772f12.txt, "Leases and
fences", "Bounded retries", "Alpha.2 accounting").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runtime.jobs.errors import (
    AttemptClosed,
    CallBudgetExhausted,
    JobConflict,
    JobError,
    LeaseExpired,
    ModelVersionMismatch,
    NotLeaseOwner,
    NotReprocessable,
    StaleFence,
)
from runtime.jobs.models import (
    RENEW_EVERY_S,
    AttemptEvent,
    AttemptFailure,
    EventKind,
    EvidenceRecord,
    Interpretation,
    JobState,
    LeasedJob,
    Refusal,
    StagedResult,
    Usage,
)

EXHAUSTED_ATTEMPTS = "worker attempt budget spent"
EXHAUSTED_CALLS = "model call budget spent"
REPROCESSABLE = (
    JobState.PUBLISHED,
    JobState.WAITING_ONTOLOGY,
    JobState.WAITING_IDENTITY,
    JobState.WAITING_REVIEW,
    JobState.FAILED,
    JobState.EXHAUSTED,
)


@dataclass(frozen=True)
class Decision:
    """What one transaction writes, returns, or raises after writing."""

    job: LeasedJob
    """The job as the transaction leaves it (returned when there is no error)."""
    changed: bool = False
    """Whether `job` must be written back."""
    events: tuple[AttemptEvent, ...] = ()
    interpretation: Interpretation | None = None
    error: JobError | None = None

    def outcome(self) -> LeasedJob:
        if self.error is not None:
            raise self.error
        return self.job


def unchanged(job: LeasedJob) -> Decision:
    return Decision(job=job)


def _put(job: LeasedJob, now: datetime, **changes: Any) -> LeasedJob:
    return job.model_copy(update={**changes, "updated_at": now})


def _event(
    job: LeasedJob,
    index: int,
    kind: EventKind,
    now: datetime,
    *,
    fence: int | None = None,
    worker: str | None = None,
    interpretation: int | None = None,
    call: int | None = None,
    usage: Usage | None = None,
    refused: Refusal | None = None,
    detail: str = "",
) -> AttemptEvent:
    return AttemptEvent(
        job_id=job.id,
        index=index,
        kind=kind,
        fence=job.fence if fence is None else fence,
        worker=worker,
        interpretation=job.interpretation if interpretation is None else interpretation,
        call=call,
        usage=usage,
        refused=refused,
        detail=detail,
        at=now,
    )


def interpretation_of(events: Sequence[AttemptEvent], fence: int, default: int) -> int:
    """The interpretation the attempt of `fence` was working on."""
    for event in reversed(events):
        if event.fence == fence and event.kind is EventKind.STARTED:
            return event.interpretation
    return default


# -- receipt -------------------------------------------------------------------


def decide_receive(
    evidence: EvidenceRecord,
    job: LeasedJob,
    stored_evidence: EvidenceRecord | None,
    stored_job: LeasedJob | None,
) -> tuple[bool, bool]:
    """(insert evidence?, insert job?) or JobConflict. The job must be fresh."""
    if job.evidence_id != evidence.id:
        raise JobConflict(job.id, f"the job names evidence {job.evidence_id}, not {evidence.id}")
    if job.workspace != evidence.workspace:
        raise JobConflict(job.id, "the job and its evidence belong to different workspaces")
    if (
        job.state is not JobState.QUEUED
        or job.fence
        or job.lease_owner
        or job.attempts_used
        or job.model_calls_reserved
    ):
        raise JobConflict(job.id, "a received job must be queued with no lease and no spent budget")
    if stored_evidence is not None and stored_evidence != evidence:
        raise JobConflict(job.id, f"evidence {evidence.id} already holds a different payload")
    if stored_job is not None and (
        stored_job.evidence_id != job.evidence_id
        or stored_job.workspace != job.workspace
        or stored_job.model_version != job.model_version
        or stored_job.created_at != job.created_at
    ):
        raise JobConflict(job.id, "the job id is already used for different work")
    return stored_evidence is None, stored_job is None


# -- claim ---------------------------------------------------------------------


def decide_claim(
    job: LeasedJob, worker_id: str, now: datetime, lease_s: float, next_event: int
) -> Decision:
    """Claim an eligible candidate, or exhaust it when its budgets are spent."""
    events: list[AttemptEvent] = []
    if job.lease_owner is not None:  # a lapsed lease: its attempt ends here
        events.append(_event(job, next_event, EventKind.EXPIRED_LEASE, now, worker=job.lease_owner))
    spent = _spent_reason(job, attempts_needed=1)
    if spent is not None:
        new = _put(job, now, state=JobState.EXHAUSTED, error=spent, retry_at=None, **_no_lease())
        events.append(_event(job, next_event + len(events), EventKind.FAILED, now, detail=spent))
        return Decision(job=new, changed=True, events=tuple(events))
    new = _put(
        job,
        now,
        state=JobState.QUEUED,
        fence=job.fence + 1,
        lease_owner=worker_id,
        lease_expires_at=now + timedelta(seconds=lease_s),
        lease_renewed_at=now,
        lease_s=lease_s,
        attempts_used=job.attempts_used + 1,
        retry_at=None,
    )
    return Decision(job=new, changed=True, events=tuple(events))


def _spent_reason(job: LeasedJob, *, attempts_needed: int) -> str | None:
    if job.attempts_used + attempts_needed > job.max_attempts:
        return EXHAUSTED_ATTEMPTS
    if job.model_calls_reserved >= job.max_model_calls:
        return EXHAUSTED_CALLS
    return None


def _no_lease() -> dict[str, Any]:
    return {"lease_owner": None, "lease_expires_at": None, "lease_renewed_at": None}


# -- fenced operations ------------------------------------------------------------


def check_lease(
    job: LeasedJob,
    fence: int,
    owner: str,
    now: datetime,
    repeat: Callable[[LeasedJob], bool] | None = None,
) -> Refusal | None:
    """None when `owner` holds the live lease of `fence`; else why not.

    An attempt already closed by the very outcome asked for (`repeat`) is not
    refused: the caller returns the job unchanged (a repeat after an
    ambiguous commit).
    """
    if fence != job.fence:
        return Refusal.STALE_FENCE
    if job.settled_fence == fence:
        return None if repeat is not None and repeat(job) else Refusal.ATTEMPT_CLOSED
    if job.lease_owner != owner:
        return Refusal.NOT_OWNER
    if not job.leased_at(now):
        return Refusal.LEASE_EXPIRED
    return None


def refusal_error(job: LeasedJob, fence: int, owner: str, refusal: Refusal) -> JobError:
    if refusal is Refusal.STALE_FENCE:
        return StaleFence(job.id, fence, job.fence)
    if refusal is Refusal.ATTEMPT_CLOSED:
        return AttemptClosed(job.id, fence)
    if refusal is Refusal.NOT_OWNER:
        return NotLeaseOwner(job.id, fence, owner, job.lease_owner)
    return LeaseExpired(job.id, fence)


def decide_renew(
    job: LeasedJob, fence: int, owner: str, now: datetime, renew_every_s: float = RENEW_EVERY_S
) -> Decision:
    refusal = check_lease(job, fence, owner, now)
    if refusal is not None:
        return Decision(job=job, error=refusal_error(job, fence, owner, refusal))
    renewed = job.lease_renewed_at
    if renewed is not None and now - renewed < timedelta(seconds=renew_every_s):
        return unchanged(job)
    new = _put(
        job, now, lease_expires_at=now + timedelta(seconds=job.lease_s), lease_renewed_at=now
    )
    return Decision(job=new, changed=True)


def decide_reserve(
    job: LeasedJob, fence: int, owner: str, now: datetime, next_event: int
) -> Decision:
    refusal = check_lease(job, fence, owner, now)
    if refusal is not None:
        return Decision(job=job, error=refusal_error(job, fence, owner, refusal))
    if job.model_calls_reserved >= job.max_model_calls:
        return Decision(job=job, error=CallBudgetExhausted(job.id, job.max_model_calls))
    call = job.model_calls_reserved + 1
    new = _put(job, now, model_calls_reserved=call)
    event = _event(job, next_event, EventKind.STARTED, now, worker=owner, call=call)
    return Decision(job=new, changed=True, events=(event,))


def decide_stage(
    job: LeasedJob,
    fence: int,
    owner: str,
    model_version: str,
    result: StagedResult,
    now: datetime,
    next_event: int,
    call_interpretation: int,
) -> Decision:
    """Commit the interpretation, or keep only the returned usage and refuse."""

    def same(j: LeasedJob) -> bool:
        return j.state is result.state and j.bundle == result.bundle

    refusal = check_lease(job, fence, owner, now, repeat=same)
    error: JobError | None = None
    if refusal is not None:
        error = refusal_error(job, fence, owner, refusal)
    elif job.settled_fence == fence:
        return unchanged(job)
    elif model_version != job.model_version:
        refusal = Refusal.MODEL_VERSION
        error = ModelVersionMismatch(job.id, fence, job.model_version, model_version)
    if refusal is not None:
        kept = _event(
            job,
            next_event,
            EventKind.COMPLETED,
            now,
            fence=fence,
            worker=owner,
            interpretation=call_interpretation,
            usage=result.usage,
            refused=refusal,
            detail=f"result not staged: {refusal.value}",
        )
        return Decision(job=job, events=(kept,), error=error)
    interpretation = Interpretation(
        job_id=job.id,
        number=job.interpretation,
        fence=fence,
        model_version=model_version,
        state=result.state,
        bundle=result.bundle,
        usage=result.usage,
        created_at=now,
    )
    new = _put(
        job,
        now,
        state=result.state,
        bundle=result.bundle,
        diagnostic=None,
        error=None,
        settled_fence=fence,
        **_no_lease(),
    )
    event = _event(
        job,
        next_event,
        EventKind.COMPLETED,
        now,
        worker=owner,
        usage=result.usage,
        detail=f"staged as {result.state.value}",
    )
    return Decision(job=new, changed=True, events=(event,), interpretation=interpretation)


def _close(
    job: LeasedJob,
    fence: int,
    owner: str,
    failure: AttemptFailure,
    now: datetime,
    next_event: int,
    target: JobState,
    repeat_states: tuple[JobState, ...],
    retry_at: datetime | None = None,
    call_interpretation: int | None = None,
) -> Decision:
    def same(j: LeasedJob) -> bool:
        return j.state in repeat_states and j.error == failure.reason

    refusal = check_lease(job, fence, owner, now, repeat=same)
    if refusal is not None:
        error = refusal_error(job, fence, owner, refusal)
        if failure.usage is None:
            return Decision(job=job, error=error)
        # The model returned this usage with its error: keep it, as a refused
        # stage keeps its result's usage (seed 004, "Alpha.2 accounting").
        kept = _event(
            job,
            next_event,
            EventKind.FAILED,
            now,
            fence=fence,
            worker=owner,
            interpretation=call_interpretation,
            usage=failure.usage,
            refused=refusal,
            detail=f"failure not recorded: {refusal.value}: {failure.reason}",
        )
        return Decision(job=job, events=(kept,), error=error)
    if job.settled_fence == fence:
        return unchanged(job)
    new = _put(
        job,
        now,
        state=target,
        retry_at=retry_at if target is JobState.RETRY_SCHEDULED else None,
        error=failure.reason,
        diagnostic=failure.diagnostic,
        settled_fence=fence,
        **_no_lease(),
    )
    event = _event(
        job,
        next_event,
        EventKind.FAILED,
        now,
        worker=owner,
        usage=failure.usage,
        detail=f"{target.value}: {failure.reason}",
    )
    return Decision(job=new, changed=True, events=(event,))


def decide_retry(
    job: LeasedJob,
    fence: int,
    owner: str,
    retry_at: datetime,
    failure: AttemptFailure,
    now: datetime,
    next_event: int,
    call_interpretation: int | None = None,
) -> Decision:
    """retry_scheduled, or exhausted when no attempt or call would be left.

    `call_interpretation` (of the fence's attempt) labels the usage a refused
    closing keeps; it defaults to the job's current interpretation.
    """
    spent = _spent_reason(job, attempts_needed=1)
    target = JobState.RETRY_SCHEDULED if spent is None else JobState.EXHAUSTED
    if spent is not None:
        failure = failure.model_copy(update={"reason": f"{failure.reason}; {spent}"})
    return _close(
        job,
        fence,
        owner,
        failure,
        now,
        next_event,
        target,
        (JobState.RETRY_SCHEDULED, JobState.EXHAUSTED),
        retry_at,
        call_interpretation,
    )


def decide_fail(
    job: LeasedJob,
    fence: int,
    owner: str,
    failure: AttemptFailure,
    now: datetime,
    next_event: int,
    call_interpretation: int | None = None,
) -> Decision:
    return _close(
        job,
        fence,
        owner,
        failure,
        now,
        next_event,
        JobState.FAILED,
        (JobState.FAILED,),
        call_interpretation=call_interpretation,
    )


def decide_exhaust(
    job: LeasedJob,
    fence: int,
    owner: str,
    failure: AttemptFailure,
    now: datetime,
    next_event: int,
    call_interpretation: int | None = None,
) -> Decision:
    return _close(
        job,
        fence,
        owner,
        failure,
        now,
        next_event,
        JobState.EXHAUSTED,
        (JobState.EXHAUSTED,),
        call_interpretation=call_interpretation,
    )


def decide_reprocess(job: LeasedJob, now: datetime) -> Decision:
    if job.state not in REPROCESSABLE:
        return Decision(job=job, error=NotReprocessable(job.id, job.state.value))
    new = _put(
        job,
        now,
        state=JobState.QUEUED,
        interpretation=job.interpretation + 1,
        attempts_used=0,
        model_calls_reserved=0,
        retry_at=None,
        error=None,
        diagnostic=None,
        **_no_lease(),
    )
    return Decision(job=new, changed=True)


# -- withdrawal (containment of a job its owner cancelled) --------------------------


def contained(job: LeasedJob, now: datetime) -> bool:
    """No worker can claim the job or commit for it any more: it has ended
    (published, failed or exhausted) and no lease on it is live (seed 000,
    "Delegated AgentJob labor": containment is acknowledged only when this
    holds; a waiting job still awaits its dependency, so it is not)."""
    return job.state.terminal and not job.leased_at(now)


def decide_withdraw(job: LeasedJob, reason: str, now: datetime, next_event: int) -> Decision:
    """Contain a job whose owner cancelled it, when that can be done honestly.

    A live lease is never overridden: its worker may still stage, so the job
    is returned unchanged (not contained; ask again once the attempt ended or
    the lease lapsed). A terminal job is returned unchanged. A pending or
    waiting job without a live lease becomes `failed` with `reason`: it is no
    longer claimable, a lapsed lease is recorded as `expired_lease` and its
    attempt closed (a late result from that fence is refused), and the
    evidence, the staged interpretations and the spent budgets are kept.
    """
    if job.state.terminal or job.leased_at(now):
        return unchanged(job)
    events: list[AttemptEvent] = []
    closes: dict[str, Any] = {}
    if job.lease_owner is not None:  # a lapsed lease: its attempt ends here
        events.append(_event(job, next_event, EventKind.EXPIRED_LEASE, now, worker=job.lease_owner))
        closes["settled_fence"] = job.fence
    new = _put(
        job,
        now,
        state=JobState.FAILED,
        retry_at=None,
        error=reason,
        diagnostic={"withdrawn_from": job.state.value},
        **closes,
        **_no_lease(),
    )
    events.append(
        _event(job, next_event + len(events), EventKind.FAILED, now, detail=f"failed: {reason}")
    )
    return Decision(job=new, changed=True, events=tuple(events))
