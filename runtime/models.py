"""The canonical records of the run engine.

A `Run` is the workflow record; a `RunDelivery` is one exact broker hop of a
Run, identified by its enqueue sequence (seed 000_81a5c720b14d934a.txt,
"Admission and exact claim"). Every model is immutable: a ledger transaction
returns new values, never a mutable view into its storage.
"""

from __future__ import annotations

import enum
import hashlib
import json
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, field_validator

from runtime.keys import hop_key


class Frozen(BaseModel):
    """Base for records: immutable and strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class RunStatus(enum.StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    AWAITING_HARDWARE = "AWAITING_HARDWARE"
    AWAITING_CONSENT = "AWAITING_CONSENT"
    AWAITING_DELEGATE = "AWAITING_DELEGATE"
    AWAITING_SERVICE = "AWAITING_SERVICE"
    CANCELLING = "CANCELLING"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED})


class DeliveryState(enum.StrEnum):
    HELD = "HELD"
    PENDING = "PENDING"
    PUBLISHED = "PUBLISHED"
    CLAIMED = "CLAIMED"
    SETTLED = "SETTLED"
    FAILED = "FAILED"

    @property
    def closed(self) -> bool:
        return self in (DeliveryState.SETTLED, DeliveryState.FAILED)


class ResumeMode(enum.StrEnum):
    FRESH = "fresh"
    RESUME = "resume"


class Intent(Frozen):
    """What a surface asks to run.

    `priority` is the requested doctrine priority (0-100, higher first); when
    absent the QueueRouter's rule decides. `idempotency_key` is scoped by the
    caller's source and sigil.
    """

    pattern: str = Field(min_length=1)
    prompt: str = ""
    source: str = "api"
    sigil: str = "anonymous"
    scopes: tuple[str, ...] = ()
    content: dict[str, Any] = Field(default_factory=dict)
    session: str | None = None
    priority: int | None = Field(default=None, ge=0, le=100)
    idempotency_key: str | None = None

    @field_validator("idempotency_key")
    @classmethod
    def _key_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("idempotency key must not be empty")
        return value

    def fingerprint(self) -> str:
        """Digest of everything an idempotent replay must match exactly."""
        material = {
            "session": self.session,
            "prompt": self.prompt,
            "source": self.source,
            "sigil": self.sigil,
            "scopes": list(self.scopes),
            "content": self.content,
            "priority": self.priority,
            "pattern": self.pattern,
        }
        blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


class Run(Frozen):
    id: UUID
    pattern: str
    pattern_version: int
    queue: str
    priority: int = Field(ge=0, le=100)
    status: RunStatus
    seq: int = Field(ge=0, description="sequence of the Run's current delivery")
    session: str | None = None
    idempotency_scope: str | None = None
    idempotency_key: str | None = None
    fingerprint: str
    intent: Intent
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    consent_id: UUID | None = None
    agent_job_id: UUID | None = None
    service_attempt_id: UUID | None = None


class RunDelivery(Frozen):
    run_id: UUID
    seq: int = Field(ge=0)
    state: DeliveryState
    mode: ResumeMode = ResumeMode.FRESH
    queue: str
    priority: int = Field(ge=0, le=100, description="doctrine priority, 0-100")
    held_by: str | None = Field(
        default=None, description="the caller-retention owner while HELD, if any"
    )
    claimed_boot: str | None = None
    claim_token: str | None = Field(
        default=None, description="identity of the hop invocation that claimed it"
    )
    created_at: datetime
    updated_at: datetime

    @property
    def key(self) -> str:
        return hop_key(self.run_id, self.seq)

    @property
    def broker_priority(self) -> int:
        """SAQ dequeues lower values first: the enqueue edge inverts doctrine priority."""
        return 100 - self.priority

    def next_generation(self, now: datetime) -> RunDelivery:
        """The delivery a rotation puts in this one's place: seq + 1, PENDING, neither
        held nor claimed, created `now`; its mode, queue and priority kept."""
        return self.model_copy(
            update={
                "seq": self.seq + 1,
                "state": DeliveryState.PENDING,
                "claimed_boot": None,
                "claim_token": None,
                "held_by": None,
                "created_at": now,
                "updated_at": now,
            }
        )


class Admission(Frozen):
    """Result of `Ledger.admit_run`: the canonical Run and its delivery at that moment.

    `busy` is the Bridge session's other nonterminal Run when the session
    fence refused the admission: nothing was written, and `run`/`delivery`
    are the records that were offered."""

    run: Run
    delivery: RunDelivery
    created: bool
    busy: Run | None = None


class Claim(Frozen):
    """Result of `Ledger.claim_delivery`. `claimed` false means stale or duplicate."""

    claimed: bool
    run: Run | None
    delivery: RunDelivery | None


class Settlement(Frozen):
    """What a hop asks to commit as terminal truth."""

    status: RunStatus
    result: dict[str, Any] | None = None
    error: str | None = None

    @field_validator("status")
    @classmethod
    def _terminal(cls, value: RunStatus) -> RunStatus:
        if not value.terminal:
            raise ValueError(f"settlement status must be terminal, got {value}")
        return value


class Step(Frozen):
    """One persisted lifecycle event of a Run, in writer order."""

    run_id: UUID
    index: int = Field(ge=0)
    seq: int = Field(ge=0, description="the delivery sequence of the hop that wrote it")
    kind: str
    data: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime




class ConsentStatus(enum.StrEnum):
    PENDING = "PENDING"
    APPROVED = "APPROVED"
    DENIED = "DENIED"
    CANCELLED = "CANCELLED"

    @property
    def decided(self) -> bool:
        return self in (ConsentStatus.APPROVED, ConsentStatus.DENIED)


class Consent(Frozen):
    """A human verdict a Run waits for (seed 000, "Events, settlement, and waits").

    `owner` is the principal allowed to decide; a decision records who decided
    and when. The identity exists before the checkpoint that refers to it.
    """

    id: UUID
    run_id: UUID
    seq: int = Field(ge=0, description="the hop that asked")
    node: str
    prompt: str = ""
    owner: str
    status: ConsentStatus = ConsentStatus.PENDING
    decided_by: str | None = None
    decided_at: datetime | None = None
    created_at: datetime


class AgentJobStatus(enum.StrEnum):
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    LOST = "LOST"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (
            AgentJobStatus.SUCCEEDED,
            AgentJobStatus.FAILED,
            AgentJobStatus.LOST,
            AgentJobStatus.CANCELLED,
        )


class AgentJob(Frozen):
    """Work delegated to another agent runtime, owned by exactly one Run wait."""

    id: UUID
    run_id: UUID
    seq: int = Field(ge=0)
    node: str
    request: dict[str, Any] = Field(default_factory=dict)
    status: AgentJobStatus = AgentJobStatus.SUBMITTED
    result: dict[str, Any] | None = None
    created_at: datetime
    updated_at: datetime


class CheckpointRecord(Frozen):
    """One Run's checkpoint document, stored whole (one JSONB document per Run)."""

    run_id: UUID
    seq: int = Field(ge=0, description="the hop that wrote it")
    document: dict[str, Any]
    consent_id: UUID | None = Field(
        default=None, description="the consent its first resumable snapshot binds"
    )
    agent_job_id: UUID | None = Field(
        default=None, description="the agent job its first resumable snapshot binds"
    )
    service_attempt_id: UUID | None = Field(
        default=None, description="the service attempt its first resumable snapshot binds"
    )
    updated_at: datetime


class LedgerDump(Frozen):
    """Every record of a ledger, in a canonical order: what checkers and receipts read."""

    runs: list[Run]
    deliveries: list[RunDelivery]
    steps: list[Step]
    consents: list[Consent] = Field(default_factory=list)
    agent_jobs: list[AgentJob] = Field(default_factory=list)
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)
