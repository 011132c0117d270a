"""The ServiceAttemptStore seam: durable ServiceJobAttempt@1 records.

Seed 000_81a5c720b14d934a.txt, "Service job attempts". One method per
transaction; each locks the attempt, applies the `runtime.service.rules`
decision and writes it, or raises that decision's typed refusal having
written nothing. Implementations: `runtime.adapters.memory.service_store.
MemoryServiceStore` (the reference) and `runtime.adapters.postgres.
service_store.PostgresServiceStore`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol
from uuid import UUID

from runtime.service.models import Evidence, ServiceJobAttempt, ServiceOutcome


class ServiceAttemptStore(Protocol):
    async def prepare(self, attempt: ServiceJobAttempt) -> ServiceJobAttempt:
        """Persist a PREPARED attempt before any submit. The same key with the
        same content returns the stored attempt; a changed payload, target,
        owner or generation for that key raises ServicePayloadConflict."""
        ...

    async def get(self, attempt_id: UUID) -> ServiceJobAttempt | None: ...

    async def by_key(self, idempotency_key: str) -> ServiceJobAttempt | None: ...

    async def owned_by(self, run_id: UUID) -> list[ServiceJobAttempt]:
        """Every attempt whose owner is this Run, by (created_at, id): what
        cancellation must contain."""
        ...

    async def begin_submit(self, attempt_id: UUID, now: datetime) -> ServiceJobAttempt:
        """CAS PREPARED -> SUBMITTING (one transmission); IllegalTransition otherwise."""
        ...

    async def begin_resubmit(
        self, attempt_id: UUID, proof: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        """SUBMITTING | INDETERMINATE -> SUBMITTING with one more transmission,
        only on NO_EFFECT (and no provider job known) or SAME_KEY_REPLAY proof."""
        ...

    async def accept(
        self, attempt_id: UUID, provider_job_id: str, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        """Persist the provider job identity with ACCEPTED."""
        ...

    async def mark_running(
        self, attempt_id: UUID, progress_cursor: str | None, now: datetime
    ) -> ServiceJobAttempt: ...

    async def mark_indeterminate(
        self, attempt_id: UUID, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt: ...

    async def settle(
        self, attempt_id: UUID, outcome: ServiceOutcome, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        """Terminal truth on proof; an identical repeat returns the attempt, a
        different one raises ServiceResultConflict."""
        ...

    async def request_cancel(self, attempt_id: UUID, now: datetime) -> ServiceJobAttempt:
        """Record cancellation intent (once); no state change."""
        ...

    async def add_evidence(
        self, attempt_id: UUID, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt: ...

    async def open_attempts(
        self, after: tuple[datetime, UUID] | None, limit: int
    ) -> list[ServiceJobAttempt]:
        """Nonterminal attempts by (created_at, id), strictly after the cursor."""
        ...
