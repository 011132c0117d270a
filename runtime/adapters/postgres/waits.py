"""Durable waits on PostgreSQL: checkpoints, consent, delegation, hardware, cancellation.

The same rules as `runtime.adapters.memory.waits` (the reference), each
method one transaction: a checkpoint or owner row is written only while its
Run is live at that exact sequence; a park verifies the checkpoint and owner
bind the Run before moving it to its wait and settling the claimed delivery;
a readmit is the owner CAS that returns the Run to QUEUED with a fresh
PENDING resume delivery at `seq + 1` (seed 000_81a5c720b14d934a.txt,
"Events, settlement, and waits"; seed 003_9b07f1601fdd86c6.txt).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from runtime.adapters.postgres import queries as q
from runtime.adapters.postgres import wait_queries as wq
from runtime.adapters.postgres.rows import (
    aware,
    checkpoint_from_row,
    checkpoint_params,
    consent_from_row,
    consent_params,
    delivery_from_row,
    delivery_params,
    job_from_row,
    job_params,
    run_from_row,
)
from runtime.adapters.postgres.tx import (
    Cursor,
    Transactional,
    fetch_delivery,
    fetch_run,
    key,
    maybe,
    one,
)
from runtime.models import (
    AgentJob,
    AgentJobStatus,
    CheckpointRecord,
    Consent,
    ConsentStatus,
    DeliveryState,
    ResumeMode,
    Run,
    RunDelivery,
    RunStatus,
)
from runtime.service.models import ServiceState

CHECKPOINTABLE = (RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)


class WaitsMixin(Transactional):
    # -- checkpoints ------------------------------------------------------------

    async def save_checkpoint(self, record: CheckpointRecord) -> bool:
        async with self._transaction() as cur:
            if not _holds(await fetch_run(cur, q.LOCK_RUN, record.run_id), record.seq,
                          CHECKPOINTABLE):  # fmt: skip
                return False
            await cur.execute(wq.SAVE_CHECKPOINT, checkpoint_params(record))
            return True

    async def load_checkpoint(self, run_id: UUID) -> CheckpointRecord | None:
        async with self._transaction() as cur:
            row = await maybe(cur, wq.GET_CHECKPOINT, {"run_id": run_id})
            return None if row is None else checkpoint_from_row(row)

    async def delete_checkpoint(self, run_id: UUID) -> bool:
        async with self._transaction() as cur:
            await cur.execute(wq.DELETE_CHECKPOINT, {"run_id": run_id, "terminal": q.TERMINAL})
            return bool((await one(cur))["terminal"])

    async def checkpoint_debts(self, limit: int, after: UUID | None = None) -> list[UUID]:
        async with self._transaction() as cur:
            await cur.execute(wq.CHECKPOINT_DEBTS,
                              {"terminal": q.TERMINAL, "limit": limit, "after": after})
            return [row["run_id"] for row in await cur.fetchall()]

    # -- consent ------------------------------------------------------------------

    async def create_consent(self, consent: Consent) -> Consent | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, consent.run_id)
            existing = await _consent(cur, wq.GET_CONSENT, consent.id)
            if existing is not None:
                return existing
            if not _holds(run, consent.seq, (RunStatus.RUNNING,)):
                return None
            await cur.execute(wq.INSERT_CONSENT, consent_params(consent))
            await one(cur)
            return consent

    async def get_consent(self, consent_id: UUID) -> Consent | None:
        async with self._transaction() as cur:
            return await _consent(cur, wq.GET_CONSENT, consent_id)

    async def consents_of(self, run_id: UUID) -> list[Consent]:
        async with self._transaction() as cur:
            await cur.execute(wq.CONSENTS_OF, {"run_id": run_id})
            return [consent_from_row(r) for r in await cur.fetchall()]

    async def park_consent(
        self, run_id: UUID, seq: int, consent_id: UUID, now: datetime
    ) -> Run | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            if (
                run is not None
                and run.status is RunStatus.AWAITING_CONSENT
                and run.consent_id == consent_id
            ):
                return run  # repeated after an ambiguous commit
            consent = await _consent(cur, wq.LOCK_CONSENT, consent_id)
            checkpoint = await _checkpoint(cur, run_id)
            if (
                not _holds(run, seq, (RunStatus.RUNNING,))
                or consent is None
                or consent.run_id != run_id
                or consent.status is ConsentStatus.CANCELLED
                or checkpoint is None
                or checkpoint.consent_id != consent_id
            ):
                return None
            return await _park(cur, wq.PARK_FOR_CONSENT, run_id, seq, consent_id, now)

    async def decide_consent(
        self, consent_id: UUID, approve: bool, principal: str, now: datetime
    ) -> Consent | None:
        async with self._transaction() as cur:
            consent = await _consent(cur, wq.LOCK_CONSENT, consent_id)
            if consent is None or consent.status is not ConsentStatus.PENDING:
                return consent
            verdict = ConsentStatus.APPROVED if approve else ConsentStatus.DENIED
            params = {
                "id": consent_id,
                "status": verdict.value,
                "principal": principal,
                "now": aware(now),
            }
            await cur.execute(wq.DECIDE_CONSENT, params)
            return consent_from_row(await one(cur))

    async def cancel_consent(self, consent_id: UUID, now: datetime) -> Consent | None:
        async with self._transaction() as cur:
            consent = await _consent(cur, wq.LOCK_CONSENT, consent_id)
            if consent is None or consent.status is not ConsentStatus.PENDING:
                return consent
            await cur.execute(wq.CANCEL_CONSENT, {"id": consent_id})
            return consent_from_row(await one(cur))

    async def readmit_after_consent(
        self, run_id: UUID, consent_id: UUID, now: datetime
    ) -> RunDelivery | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            consent = await _consent(cur, wq.LOCK_CONSENT, consent_id)
            if (
                run is None
                or run.status is not RunStatus.AWAITING_CONSENT
                or run.consent_id != consent_id
                or consent is None
                or consent.run_id != run_id
                or not consent.status.decided
                or consent.decided_by is None
                or consent.decided_at is None
            ):
                return None
            return await _readmit(cur, run, now)

    # -- delegation -------------------------------------------------------------

    async def create_agent_job(self, job: AgentJob) -> AgentJob | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, job.run_id)
            existing = await _job(cur, wq.GET_JOB, job.id)
            if existing is not None:
                return existing
            if not _holds(run, job.seq, (RunStatus.RUNNING,)):
                return None
            await cur.execute(wq.INSERT_JOB, job_params(job))
            await one(cur)
            return job

    async def get_agent_job(self, job_id: UUID) -> AgentJob | None:
        async with self._transaction() as cur:
            return await _job(cur, wq.GET_JOB, job_id)

    async def agent_jobs_of(self, run_id: UUID) -> list[AgentJob]:
        async with self._transaction() as cur:
            await cur.execute(wq.JOBS_OF, {"run_id": run_id})
            return [job_from_row(r) for r in await cur.fetchall()]

    async def record_agent_job(
        self,
        job_id: UUID,
        status: AgentJobStatus,
        result: dict[str, Any] | None,
        now: datetime,
    ) -> AgentJob | None:
        async with self._transaction() as cur:
            job = await _job(cur, wq.LOCK_JOB, job_id)
            if job is None:
                return None
            lost_contained = (
                job.status is AgentJobStatus.LOST and status is AgentJobStatus.CANCELLED
            )
            if job.status.terminal and not lost_contained:
                return job
            params = {
                "id": job_id,
                "status": status.value,
                "result": None if result is None else Jsonb(result),
                "now": aware(now),
                "from_status": job.status.value,
            }
            await cur.execute(wq.RECORD_JOB, params)
            return job_from_row(await one(cur))

    async def park_delegate(
        self, run_id: UUID, seq: int, job_id: UUID, now: datetime
    ) -> Run | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            if (
                run is not None
                and run.status is RunStatus.AWAITING_DELEGATE
                and run.agent_job_id == job_id
            ):
                return run  # repeated after an ambiguous commit
            job = await _job(cur, wq.LOCK_JOB, job_id)
            checkpoint = await _checkpoint(cur, run_id)
            if (
                not _holds(run, seq, (RunStatus.RUNNING,))
                or job is None
                or job.run_id != run_id
                or checkpoint is None
                or checkpoint.agent_job_id != job_id
            ):
                return None
            return await _park(cur, wq.PARK_FOR_DELEGATE, run_id, seq, job_id, now)

    async def readmit_after_delegate(
        self, run_id: UUID, job_id: UUID, now: datetime
    ) -> RunDelivery | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            job = await _job(cur, wq.LOCK_JOB, job_id)
            if (
                run is None
                or run.status is not RunStatus.AWAITING_DELEGATE
                or run.agent_job_id != job_id
                or job is None
                or job.run_id != run_id
                or not job.status.terminal
            ):
                return None
            return await _readmit(cur, run, now)

    # -- service waits ----------------------------------------------------------------
    # The attempt row is read FOR SHARE after the Run row is locked: service
    # store transactions lock only their attempt, so the order cannot deadlock.

    async def park_service(
        self, run_id: UUID, seq: int, attempt_id: UUID, now: datetime
    ) -> Run | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            if (
                run is not None
                and run.status is RunStatus.AWAITING_SERVICE
                and run.service_attempt_id == attempt_id
            ):
                return run  # repeated after an ambiguous commit
            owned = await _owned_attempt_state(cur, run_id, attempt_id)
            checkpoint = await _checkpoint(cur, run_id)
            if (
                not _holds(run, seq, (RunStatus.RUNNING,))
                or owned is None
                or checkpoint is None
                or checkpoint.service_attempt_id != attempt_id
            ):
                return None
            return await _park(cur, wq.PARK_FOR_SERVICE, run_id, seq, attempt_id, now)

    async def readmit_after_service(
        self, run_id: UUID, attempt_id: UUID, now: datetime
    ) -> RunDelivery | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            owned = await _owned_attempt_state(cur, run_id, attempt_id)
            if (
                run is None
                or run.status is not RunStatus.AWAITING_SERVICE
                or run.service_attempt_id != attempt_id
                or owned is None
                or not owned.terminal
            ):
                return None
            return await _readmit(cur, run, now)

    # -- hardware -------------------------------------------------------------------

    async def await_hardware(self, run_id: UUID, seq: int, now: datetime) -> Run | None:
        return await self._toggle(run_id, seq, now, RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)

    async def resume_hardware(self, run_id: UUID, seq: int, now: datetime) -> Run | None:
        return await self._toggle(run_id, seq, now, RunStatus.AWAITING_HARDWARE, RunStatus.RUNNING)

    async def _toggle(
        self, run_id: UUID, seq: int, now: datetime, source: RunStatus, target: RunStatus
    ) -> Run | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            if run is None or run.seq != seq:
                return None
            if run.status is target:
                return run  # repeated after an ambiguous commit
            if run.status is not source:
                return None
            return await _move(cur, run, target, now)

    # -- cancellation -----------------------------------------------------------------

    async def begin_cancel(self, run_id: UUID, now: datetime) -> Run | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            if run is None or run.status.terminal or run.status is RunStatus.CANCELLING:
                return run
            return await _move(cur, run, RunStatus.CANCELLING, now)

    async def finish_cancel(self, run_id: UUID, seq: int, now: datetime) -> Run | None:
        async with self._transaction() as cur:
            run = await fetch_run(cur, q.LOCK_RUN, run_id)
            if run is not None and run.status is RunStatus.CANCELLED and run.seq == seq:
                return run
            if not _holds(run, seq, (RunStatus.CANCELLING,)):
                return None
            assert run is not None
            d = await fetch_delivery(cur, q.LOCK_DELIVERY, run_id, seq)
            if d is not None and not d.state.closed:
                closed = (
                    DeliveryState.SETTLED
                    if d.state is DeliveryState.CLAIMED
                    else DeliveryState.FAILED
                )
                await cur.execute(
                    wq.CLOSE_DELIVERY,
                    {**key(run_id, seq, now), "to_state": closed.value,
                     "from_state": d.state.value},
                )  # fmt: skip
            await cur.execute(wq.CANCEL_PENDING_CONSENTS_OF_RUN, {"run_id": run_id})
            await cur.execute(q.OWE_LATE_FENCE, {"run_id": run_id})  # startup probes it once
            return await _move(cur, run, RunStatus.CANCELLED, now)


# -- helpers ------------------------------------------------------------------------


def _holds(run: Run | None, seq: int, statuses: tuple[RunStatus, ...]) -> bool:
    return run is not None and run.seq == seq and run.status in statuses


async def _consent(cur: Cursor, query: Any, consent_id: UUID) -> Consent | None:
    row = await maybe(cur, query, {"id": consent_id})
    return None if row is None else consent_from_row(row)


async def _job(cur: Cursor, query: Any, job_id: UUID) -> AgentJob | None:
    row = await maybe(cur, query, {"id": job_id})
    return None if row is None else job_from_row(row)


async def _owned_attempt_state(
    cur: Cursor, run_id: UUID, attempt_id: UUID
) -> ServiceState | None:
    row = await maybe(cur, wq.LOCK_OWNED_ATTEMPT, {"id": attempt_id, "run_id": run_id})
    return None if row is None else ServiceState(row["state"])


async def _checkpoint(cur: Cursor, run_id: UUID) -> CheckpointRecord | None:
    row = await maybe(cur, wq.GET_CHECKPOINT, {"run_id": run_id})
    return None if row is None else checkpoint_from_row(row)


async def _move(cur: Cursor, run: Run, target: RunStatus, now: datetime) -> Run:
    params = {
        **key(run.id, run.seq, now),
        "to_status": target.value,
        "from_status": run.status.value,
    }
    await cur.execute(wq.MOVE_RUN, params)
    return run_from_row(await one(cur))


async def _park(cur: Cursor, query: Any, run_id: UUID, seq: int, owner: UUID, now: datetime) -> Run:
    """Settle the claimed delivery and move the Run to its wait with its exact owner."""
    await cur.execute(q.SETTLE_PARKED_DELIVERY, key(run_id, seq, now))
    await one(cur)
    await cur.execute(query, {**key(run_id, seq, now), "owner": owner})
    return run_from_row(await one(cur))


async def _readmit(cur: Cursor, run: Run, now: datetime) -> RunDelivery:
    """QUEUED at seq + 1 with a fresh PENDING resume delivery on the previous lane."""
    prev = await fetch_delivery(cur, q.LOCK_DELIVERY, run.id, run.seq)
    if prev is None:
        raise LookupError(f"Run {run.id} has no delivery {run.seq}")
    fresh = RunDelivery(
        run_id=run.id,
        seq=run.seq + 1,
        state=DeliveryState.PENDING,
        mode=ResumeMode.RESUME,
        queue=prev.queue,
        priority=prev.priority,
        created_at=now,
        updated_at=now,
    )
    await cur.execute(q.INSERT_DELIVERY, delivery_params(fresh))
    stored = delivery_from_row(await one(cur))
    await cur.execute(
        wq.READMIT_RUN, {**key(run.id, run.seq, now), "from_status": run.status.value}
    )
    await one(cur)
    return stored
