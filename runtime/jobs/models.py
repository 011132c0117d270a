"""Records of the leased worker (seed 004_85033eb8fc772f12.txt).

Evidence is what a receipt preserved; a `LeasedJob` is the unit of work that
interprets it. A job is claimed under a lease (owner, expiry) and a fence
token that grows on every claim: only the holder of the current fence, while
its lease is live, may stage a result. Budgets (worker attempts, reserved
model calls) are stored on the job so they survive crashes. Every model call
and every attempt outcome is an `AttemptEvent`; usage that was never returned
is `None` (unknown), which is not the same as zero.
"""

from __future__ import annotations

import enum
import hashlib
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import Field, model_validator

from runtime.models import Frozen


class JobState(enum.StrEnum):
    """The durable states of seed 004 ("Durable states")."""

    QUEUED = "queued"
    RETRY_SCHEDULED = "retry_scheduled"
    WAITING_ONTOLOGY = "waiting_ontology"
    WAITING_IDENTITY = "waiting_identity"
    WAITING_REVIEW = "waiting_review"
    PUBLISHED = "published"
    FAILED = "failed"
    EXHAUSTED = "exhausted"

    @property
    def terminal(self) -> bool:
        return self in (JobState.PUBLISHED, JobState.FAILED, JobState.EXHAUSTED)

    @property
    def waiting(self) -> bool:
        """Parked on a named dependency: neither claimable nor a completed fact."""
        return self in WAITING_STATES

    @property
    def pending(self) -> bool:
        """Work still to be claimed (when eligible)."""
        return self in (JobState.QUEUED, JobState.RETRY_SCHEDULED)


WAITING_STATES = (JobState.WAITING_ONTOLOGY, JobState.WAITING_IDENTITY, JobState.WAITING_REVIEW)
STAGED_STATES = (JobState.PUBLISHED, *WAITING_STATES)
"""What a successful staging can leave a job in: inference is not publication."""


class EventKind(enum.StrEnum):
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED_LEASE = "expired_lease"


class Refusal(enum.StrEnum):
    """Why a returned model result was not staged (its usage is still kept)."""

    STALE_FENCE = "stale_fence"
    NOT_OWNER = "not_owner"
    LEASE_EXPIRED = "lease_expired"
    MODEL_VERSION = "model_version"
    ATTEMPT_CLOSED = "attempt_closed"


RENEW_EVERY_S = 20.0
"""A lease is renewed at most this often (seed 004, "Leases and fences")."""


class JobPolicy(Frozen):
    """The defaults of seed 004 ("Leases and fences", "Bounded retries")."""

    lease_s: float = Field(default=90.0, gt=0)
    renew_every_s: float = Field(
        default=RENEW_EVERY_S,
        gt=0,
        description="how often the worker renews; the store ignores renewals within 20 s",
    )
    max_attempts: int = Field(default=3, ge=1)
    max_model_calls: int = Field(default=2, ge=1)
    model_deadline_s: float = Field(default=45.0, gt=0)
    retry_base_s: float = Field(default=5.0, ge=0)
    retry_max_s: float = Field(default=60.0, ge=0)

    def retry_delay(self, attempts_used: int) -> float:
        """Exponential backoff for the retry after attempt number `attempts_used`."""
        return float(min(self.retry_max_s, self.retry_base_s * 2 ** max(0, attempts_used - 1)))


DEFAULT_POLICY = JobPolicy()


def digest_text(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()


class EvidenceRecord(Frozen):
    """A preserved source payload. Never deleted or rewritten by processing."""

    id: UUID
    workspace: str = Field(min_length=1)
    media_type: str = "text/plain"
    payload: str
    digest: str = Field(default="", description="sha256 of the payload; filled when empty")
    received_at: datetime

    @model_validator(mode="before")
    @classmethod
    def _fill_digest(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and not data.get("digest")
            and isinstance(data.get("payload"), str)
        ):
            return {**data, "digest": digest_text(data["payload"])}
        return data

    @model_validator(mode="after")
    def _check_digest(self) -> EvidenceRecord:
        if self.digest != digest_text(self.payload):
            raise ValueError("evidence digest does not match its payload")
        return self


class Usage(Frozen):
    """Token usage a model response reported."""

    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)


class LeasedJob(Frozen):
    id: UUID
    workspace: str = Field(min_length=1)
    evidence_id: UUID
    state: JobState = JobState.QUEUED
    model_version: str = Field(min_length=1, description="the model a staged result must come from")
    fence: int = Field(default=0, ge=0, description="grows on every claim")
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    lease_renewed_at: datetime | None = None
    lease_s: float = Field(default=DEFAULT_POLICY.lease_s, gt=0)
    attempts_used: int = Field(default=0, ge=0)
    max_attempts: int = Field(default=DEFAULT_POLICY.max_attempts, ge=1)
    model_calls_reserved: int = Field(default=0, ge=0)
    max_model_calls: int = Field(default=DEFAULT_POLICY.max_model_calls, ge=1)
    interpretation: int = Field(default=1, ge=1, description="the interpretation being produced")
    retry_at: datetime | None = None
    settled_fence: int | None = Field(
        default=None, description="the fence whose attempt last closed (idempotent repeats)"
    )
    bundle: dict[str, Any] | None = Field(default=None, description="the latest staged bundle")
    diagnostic: dict[str, Any] | None = Field(
        default=None, description="what made the last attempt fail (e.g. the invalid output)"
    )
    error: str | None = None
    created_at: datetime
    updated_at: datetime

    def leased_at(self, now: datetime) -> bool:
        """A live lease: some worker holds the job at `now`."""
        return self.lease_expires_at is not None and now < self.lease_expires_at

    def eligible_at(self, now: datetime) -> bool:
        """Claimable: queued, or retry_scheduled and due, and not under a live lease."""
        if self.leased_at(now):
            return False
        if self.state is JobState.QUEUED:
            return True
        return (
            self.state is JobState.RETRY_SCHEDULED
            and self.retry_at is not None
            and self.retry_at <= now
        )

    @property
    def budget_left(self) -> bool:
        return (
            self.attempts_used < self.max_attempts
            and self.model_calls_reserved < self.max_model_calls
        )


class Interpretation(Frozen):
    """One staged reading of a job's evidence. Older ones are never retracted."""

    job_id: UUID
    number: int = Field(ge=1)
    fence: int = Field(ge=0)
    model_version: str
    state: JobState
    bundle: dict[str, Any]
    usage: Usage | None = None
    created_at: datetime

    @property
    def accepted(self) -> bool:
        return self.state is JobState.PUBLISHED


class AttemptEvent(Frozen):
    """One entry of `attempts(job_id)` (seed 004, "Alpha.2 accounting")."""

    job_id: UUID
    index: int = Field(ge=0)
    kind: EventKind
    fence: int = Field(ge=0)
    worker: str | None = None
    interpretation: int = Field(ge=1)
    call: int | None = Field(default=None, description="the model call number (started)")
    usage: Usage | None = Field(default=None, description="None = unknown, never zero")
    refused: Refusal | None = Field(
        default=None, description="set when a returned result was fenced out"
    )
    detail: str = ""
    at: datetime


class StagedResult(Frozen):
    """What a worker asks to commit for the current interpretation."""

    state: JobState = JobState.PUBLISHED
    bundle: dict[str, Any]
    usage: Usage | None = None

    @model_validator(mode="after")
    def _staged_state(self) -> StagedResult:
        if self.state not in STAGED_STATES:
            raise ValueError(f"a staged result is published or waiting, not {self.state}")
        return self


class AttemptFailure(Frozen):
    """Why an attempt ended without a staged result."""

    reason: str = Field(min_length=1)
    usage: Usage | None = None
    diagnostic: dict[str, Any] | None = None


def new_job(
    job_id: UUID,
    evidence: EvidenceRecord,
    model_version: str,
    now: datetime,
    policy: JobPolicy = DEFAULT_POLICY,
) -> LeasedJob:
    """A queued job over `evidence`, with the policy's lease and budgets."""
    return LeasedJob(
        id=job_id,
        workspace=evidence.workspace,
        evidence_id=evidence.id,
        model_version=model_version,
        lease_s=policy.lease_s,
        max_attempts=policy.max_attempts,
        max_model_calls=policy.max_model_calls,
        created_at=now,
        updated_at=now,
    )
