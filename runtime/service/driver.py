"""The ServiceDriver seam: the provider or executor behind service attempts.

Seed 000_81a5c720b14d934a.txt, "Service job attempts": every transmission
carries the exact idempotency identity; reconciliation looks a job up by its
provider identity and by that idempotency identity. A driver declares what
it can prove, because only proof authorises a second transmission:

- `lookup_proves_absence`: a lookup by idempotency identity that finds
  nothing proves no effect occurred;
- `replays_same_key`: the provider atomically replays same key + same
  payload (returning the original job) and rejects a changed payload.

A driver that offers neither cannot host autonomously repeatable effects:
an ambiguous submit then stays INDETERMINATE until an operator decides.
`runtime.adapters.reference_service.ReferenceServiceDriver` is the
deterministic implementation for tests and the simulator.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol
from uuid import UUID

from runtime.models import Frozen
from runtime.service.models import CapabilityBinding, ToolBinding


class ServiceSubmission(Frozen):
    attempt_id: UUID
    idempotency_key: str
    request_digest: str
    request: dict[str, Any]
    binding: CapabilityBinding | ToolBinding
    destination: str | None = None
    transmission: int


class SubmitAck(Frozen):
    """What the provider answered; no job identity means a malformed acknowledgement."""

    provider_job_id: str | None = None


class ProviderStatus(enum.StrEnum):
    ACCEPTED = "accepted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ProviderReport(Frozen):
    """One provider job as a lookup observed it."""

    provider_job_id: str
    idempotency_key: str
    request_digest: str
    status: ProviderStatus
    progress_cursor: str | None = None
    result: dict[str, Any] | None = None
    diagnostic: dict[str, Any] | None = None
    usage: dict[str, float] | None = None


class SubmitRejected(Exception):
    """The driver proves the submit was refused before any effect."""


class KeyReuseRejected(SubmitRejected):
    """The provider holds this key for a different payload; nothing new was started."""


class ServiceDriver(Protocol):
    @property
    def lookup_proves_absence(self) -> bool: ...

    @property
    def replays_same_key(self) -> bool: ...

    async def submit(self, submission: ServiceSubmission) -> SubmitAck:
        """Transmit. Raise SubmitRejected only with proof of no effect; any
        other failure is ambiguous (the effect may have escaped)."""
        ...

    async def lookup(
        self, *, idempotency_key: str, provider_job_id: str | None
    ) -> ProviderReport | None: ...

    async def cancel(self, *, idempotency_key: str, provider_job_id: str | None) -> bool:
        """Ask for containment; True only when execution is proved contained."""
        ...
