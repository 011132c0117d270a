"""The JobStore seam: durable leased jobs, one method per transaction.

Seed 004_85033eb8fc772f12.txt. Implementations: `runtime.adapters.memory.
jobs_store.MemoryJobStore` (the reference) and `runtime.adapters.postgres.
jobs_store.PostgresJobStore`; both pass `tests/contract/test_job_store_contract.py`.

Rules every implementation keeps:

- Every fenced method checks, in this order: the job exists (`UnknownJob`),
  `fence` is the job's current fence (`StaleFence`), the attempt of that fence
  is still open (`AttemptClosed`, unless the call repeats the outcome already
  recorded, which returns the job), `owner` holds the lease (`NotLeaseOwner`)
  and the lease is live at `now` (`LeaseExpired`). A refusal writes nothing,
  except that the usage a refused `stage` (its result) or a refused
  `schedule_retry`/`fail`/`exhaust` (its failure) carries is appended to
  the attempt log, marked `refused`: returned usage is never dropped.
- Budgets are checked and spent in the same transaction as the state they
  guard, so a crash can only consume budget, never refund it.
- No method deletes or rewrites evidence or a staged interpretation.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol
from uuid import UUID

from runtime.jobs.models import (
    AttemptEvent,
    AttemptFailure,
    EvidenceRecord,
    Interpretation,
    LeasedJob,
    StagedResult,
)


class JobStore(Protocol):
    async def receive(self, evidence: EvidenceRecord, job: LeasedJob) -> LeasedJob:
        """Preserve `evidence` and create `job` in one transaction.

        Repeating an identical receipt returns the stored job; reusing either
        id for different content raises `JobConflict` and writes nothing.
        """
        ...

    async def get(self, job_id: UUID) -> LeasedJob | None: ...

    async def evidence(self, evidence_id: UUID) -> EvidenceRecord | None: ...

    async def jobs(self, workspace: str) -> list[LeasedJob]:
        """Every job of a workspace, by (created_at, id)."""
        ...

    async def claim_one(
        self, workspace: str, worker_id: str, now: datetime, lease_s: float
    ) -> LeasedJob | None:
        """Lease at most one eligible job of `workspace` to `worker_id`.

        Eligible: queued, or retry_scheduled with `retry_at <= now`, and no
        live lease. The claim increments the fence, spends one worker
        attempt, and records `expired_lease` when it takes over a lapsed
        lease. A candidate whose attempts or model calls are already spent is
        moved to `exhausted` instead (its evidence and history kept).
        Concurrent claimers never receive the same job.
        """
        ...

    async def renew(self, job_id: UUID, fence: int, owner: str, now: datetime) -> LeasedJob:
        """Extend a live lease to `now + lease_s`; within `renew_every_s` (20 s)
        of the last renewal the job is returned unchanged."""
        ...

    async def reserve_model_call(
        self, job_id: UUID, fence: int, owner: str, now: datetime
    ) -> LeasedJob:
        """Spend one model call before any network traffic and record `started`.

        `CallBudgetExhausted` when every call is already reserved.
        """
        ...

    async def stage(
        self,
        job_id: UUID,
        fence: int,
        owner: str,
        model_version: str,
        result: StagedResult,
        now: datetime,
    ) -> LeasedJob:
        """Commit the current interpretation and release the lease.

        Checks owner, fence, lease and then `model_version`. A refused result
        keeps its usage as a `completed` event marked `refused`, and raises.
        """
        ...

    async def schedule_retry(
        self,
        job_id: UUID,
        fence: int,
        owner: str,
        retry_at: datetime,
        failure: AttemptFailure,
        now: datetime,
    ) -> LeasedJob:
        """A retryable failure: `retry_scheduled` at `retry_at`, or `exhausted`
        when no worker attempt or model call is left. Records `failed`."""
        ...

    async def fail(
        self, job_id: UUID, fence: int, owner: str, failure: AttemptFailure, now: datetime
    ) -> LeasedJob:
        """A permanent failure (invalid output, payload beyond the model's
        context): `failed`, with the diagnostic kept for inspection."""
        ...

    async def exhaust(
        self, job_id: UUID, fence: int, owner: str, failure: AttemptFailure, now: datetime
    ) -> LeasedJob:
        """Budgets spent: `exhausted`, inspectable like a failure."""
        ...

    async def reprocess(self, job_id: UUID, now: datetime) -> LeasedJob:
        """Start another interpretation of the preserved evidence.

        Only for a staged (published or waiting) or ended job; the job returns
        to `queued` with fresh budgets under the next interpretation number.
        Earlier interpretations, accepted or not, are kept as they are.
        """
        ...

    async def withdraw(self, job_id: UUID, reason: str, now: datetime) -> LeasedJob:
        """Contain a job its owner cancelled (`rules.decide_withdraw`): a
        pending or waiting job without a live lease becomes `failed` with
        `reason`; a live lease or an ended job is returned unchanged. The
        caller reads `rules.contained(job, now)` from the returned job.
        """
        ...

    async def interpretations(self, job_id: UUID) -> list[Interpretation]:
        """Every staged interpretation, oldest first."""
        ...

    async def attempts(self, job_id: UUID) -> list[AttemptEvent]:
        """The attempt log: started, completed, failed and expired_lease events."""
        ...
