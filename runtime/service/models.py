"""ServiceJobAttempt@1: the common mechanical envelope of long-running service work.

Seed 000_81a5c720b14d934a.txt, "Service job attempts (Designed)". The owning
domain worker persists one attempt before the first submit; from then on the
attempt, not any live handle, is what delivery, reconciliation, cancellation
and settlement act on. States:

    PREPARED -> SUBMITTING -> ACCEPTED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
                     |             |          |
                     +-------------+----------+-> INDETERMINATE

PREPARED proves no submit started; SUBMITTING is entered by a CAS before the
driver is called; the provider job identity is persisted with ACCEPTED. What
happens after a transmission (a timeout, a lost or malformed acknowledgement,
a crash) leaves SUBMITTING or INDETERMINATE, never FAILED, and authorises no
new transmission on its own. Every reconciliation step is kept as evidence.
"""

from __future__ import annotations

import enum
import hashlib
import json
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field, model_validator

from runtime.models import Frozen

ENVELOPE = "ServiceJobAttempt@1"


class ServiceState(enum.StrEnum):
    PREPARED = "PREPARED"
    SUBMITTING = "SUBMITTING"
    ACCEPTED = "ACCEPTED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    INDETERMINATE = "INDETERMINATE"

    @property
    def terminal(self) -> bool:
        return self in (ServiceState.SUCCEEDED, ServiceState.FAILED, ServiceState.CANCELLED)


class CapabilityBinding(Frozen):
    """A capability-backed interface at immutable revisions."""

    kind: Literal["capability"] = "capability"
    interface: str = Field(min_length=1)
    profile_revision: str = Field(min_length=1)
    profile_digest: str = Field(min_length=1)
    operation: str = Field(min_length=1)
    driver_revision: str = Field(min_length=1)
    dialect_revision: str = Field(min_length=1)


class ToolBinding(Frozen):
    """A direct-tool-backed Spell implementation under its Resolution Lock."""

    kind: Literal["tool"] = "tool"
    spell: str = Field(min_length=1)
    resolution_lock: str = Field(min_length=1)
    tool_profile: str = Field(min_length=1)
    executor_profile: str = Field(min_length=1, description="executor or Tomb profile")


ExecutionBinding = Annotated[CapabilityBinding | ToolBinding, Field(discriminator="kind")]


class AttemptOwner(Frozen):
    """The owner job and the Run/station-attempt identity the attempt belongs to."""

    job: str = Field(min_length=1)
    run_id: UUID | None = None
    station_attempt: int | None = Field(default=None, ge=0)


class ServiceEnvelope(Frozen):
    """Classified refs, destination, purpose, consent/egress and policy revisions."""

    source_refs: tuple[str, ...] = ()
    working_refs: tuple[str, ...] = ()
    destination: str | None = None
    purpose: str = ""
    egress_decision: str | None = None
    policy_revisions: dict[str, str] = Field(default_factory=dict)
    reservation: str | None = Field(
        default=None, description="the reservation/fence of managed local substrate, if any"
    )


class EvidenceKind(enum.StrEnum):
    """What one reconciliation step observed."""

    SUBMIT_REJECTED = "submit_rejected"
    """The driver proved the submit was refused before any effect."""
    SUBMIT_TIMEOUT = "submit_timeout"
    SUBMIT_ERROR = "submit_error"
    MALFORMED_ACK = "malformed_ack"
    ACCEPTED = "accepted"
    LOOKUP_FOUND = "lookup_found"
    LOOKUP_ABSENT = "lookup_absent"
    LOOKUP_FAILED = "lookup_failed"
    NO_EFFECT = "no_effect"
    """Proof that no effect occurred: re-submit (or settle) is legal."""
    SAME_KEY_REPLAY = "same_key_replay"
    """The driver replays same key + same payload atomically: re-submit is legal."""
    NEVER_SUBMITTED = "never_submitted"
    CANCEL_REQUESTED = "cancel_requested"
    CANCEL_CONTAINED = "cancel_contained"
    CANCEL_UNACKNOWLEDGED = "cancel_unacknowledged"


RESUBMIT_PROOFS = (EvidenceKind.NO_EFFECT, EvidenceKind.SAME_KEY_REPLAY)


class Evidence(Frozen):
    kind: EvidenceKind
    at: datetime
    transmission: int = Field(ge=0, description="transmissions made when it was observed")
    provider_job_id: str | None = None
    detail: str = ""


def request_digest(
    request: dict[str, Any], binding: CapabilityBinding | ToolBinding, destination: str | None
) -> str:
    """Digest of the sealed bytes and target: request, binding and destination."""
    material = {
        "request": request,
        "binding": binding.model_dump(mode="json"),
        "destination": destination,
    }
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ServiceJobAttempt(Frozen):
    id: UUID
    owner: AttemptOwner
    idempotency_key: str = Field(min_length=1)
    generation: int = Field(ge=0, description="the domain retry generation")
    request: dict[str, Any]
    request_digest: str = Field(default="", description="filled from the request when empty")
    binding: ExecutionBinding
    envelope: ServiceEnvelope = Field(default_factory=ServiceEnvelope)
    state: ServiceState = ServiceState.PREPARED
    provider_job_id: str | None = None
    progress_cursor: str | None = None
    result: dict[str, Any] | None = None
    diagnostic: dict[str, Any] | None = None
    usage: dict[str, float] | None = Field(default=None, description="None = unknown, not zero")
    transmissions: int = Field(default=0, ge=0)
    cancel_requested_at: datetime | None = None
    evidence: tuple[Evidence, ...] = ()
    version: int = Field(default=1, ge=1, description="grows with every write")
    created_at: datetime
    updated_at: datetime

    @model_validator(mode="before")
    @classmethod
    def _fill_digest(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("request_digest"):
            try:
                binding = data["binding"]
                if isinstance(binding, dict):
                    binding = (
                        ToolBinding.model_validate(binding)
                        if binding.get("kind") == "tool"
                        else CapabilityBinding.model_validate(binding)
                    )
                envelope = data.get("envelope")
                if isinstance(envelope, dict):
                    envelope = ServiceEnvelope.model_validate(envelope)
                destination = None if envelope is None else envelope.destination
                digest = request_digest(data["request"], binding, destination)
            except (KeyError, TypeError, ValueError):
                return data  # field validation reports what is missing
            return {**data, "request_digest": digest}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ServiceJobAttempt:
        return self.consistent()

    def consistent(self) -> ServiceJobAttempt:
        """The attempt itself when its digest and state agree; ValueError otherwise."""
        expected = request_digest(self.request, self.binding, self.envelope.destination)
        if self.request_digest != expected:
            raise ValueError("request_digest does not match the request, binding and destination")
        if self.state in (ServiceState.ACCEPTED, ServiceState.RUNNING) and not self.provider_job_id:
            raise ValueError(f"{self.state} requires the provider job identity")
        if self.state is ServiceState.PREPARED and self.transmissions:
            raise ValueError("PREPARED proves no submit has started")
        return self


class ServiceOutcome(Frozen):
    """Terminal truth to settle, with what the provider reported."""

    state: ServiceState
    result: dict[str, Any] | None = None
    diagnostic: dict[str, Any] | None = None
    usage: dict[str, float] | None = None

    @model_validator(mode="after")
    def _terminal(self) -> ServiceOutcome:
        if not self.state.terminal:
            raise ValueError(f"an outcome is SUCCEEDED, FAILED or CANCELLED, not {self.state}")
        return self
