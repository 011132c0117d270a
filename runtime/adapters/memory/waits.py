"""The memory ledger's durable waits: checkpoints, consent, delegation,
hardware stasis and cancellation (seeds 000 and 003).

A mixin over MemoryLedger's tables; every method is one atomic transaction
with the same rules as the PostgreSQL adapter.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from runtime.adapters.memory.fresh import hands_back_fresh
from runtime.adapters.memory.gate import enter
from runtime.adapters.memory.tables import Tables
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
from runtime.service.models import ServiceJobAttempt

CHECKPOINTABLE = (RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)


class WaitsMixin(Tables):

    def _holds(self, run_id: UUID, seq: int, statuses: tuple[RunStatus, ...]) -> Run | None:
        run = self.run_table.get(run_id)
        if run is None or run.seq != seq or run.status not in statuses:
            return None
        return run

    # -- checkpoints ------------------------------------------------------------

    async def save_checkpoint(self, record: CheckpointRecord) -> bool:
        await enter()
        if self._holds(record.run_id, record.seq, CHECKPOINTABLE) is None:
            return False
        self.checkpoint_table[record.run_id] = record
        return True

    @hands_back_fresh
    async def load_checkpoint(self, run_id: UUID) -> CheckpointRecord | None:
        await enter()
        return self.checkpoint_table.get(run_id)

    async def delete_checkpoint(self, run_id: UUID) -> bool:
        await enter()
        run = self.run_table.get(run_id)
        if run is None or not run.status.terminal:
            return False
        self.checkpoint_table.pop(run_id, None)
        return True

    async def checkpoint_debts(self, limit: int, after: UUID | None = None) -> list[UUID]:
        await enter()
        owed = [rid for rid in self.checkpoint_table
                if (run := self.run_table.get(rid)) is not None and run.status.terminal
                and (after is None or str(rid) > str(after))]
        return sorted(owed, key=str)[:limit]

    # -- consent ------------------------------------------------------------------

    @hands_back_fresh
    async def create_consent(self, consent: Consent) -> Consent | None:
        await enter()
        existing = self.consent_table.get(consent.id)
        if existing is not None:
            return existing
        if self._holds(consent.run_id, consent.seq, (RunStatus.RUNNING,)) is None:
            return None
        self.consent_table[consent.id] = consent
        return consent

    @hands_back_fresh
    async def get_consent(self, consent_id: UUID) -> Consent | None:
        await enter()
        return self.consent_table.get(consent_id)

    @hands_back_fresh
    async def consents_of(self, run_id: UUID) -> list[Consent]:
        await enter()
        mine = [c for c in self.consent_table.values() if c.run_id == run_id]
        return sorted(mine, key=lambda c: (c.created_at, c.id))

    @hands_back_fresh
    async def park_consent(
        self, run_id: UUID, seq: int, consent_id: UUID, now: datetime
    ) -> Run | None:
        await enter()
        run = self.run_table.get(run_id)
        if (
            run is not None
            and run.status is RunStatus.AWAITING_CONSENT
            and run.consent_id == consent_id
        ):
            return run  # repeated after an ambiguous commit
        consent = self.consent_table.get(consent_id)
        checkpoint = self.checkpoint_table.get(run_id)
        if (
            self._holds(run_id, seq, (RunStatus.RUNNING,)) is None
            or consent is None
            or consent.run_id != run_id
            or consent.status is ConsentStatus.CANCELLED
            or checkpoint is None
            or checkpoint.consent_id != consent_id
        ):
            return None
        return self._park(run_id, seq, now, status=RunStatus.AWAITING_CONSENT,
                          consent_id=consent_id)

    @hands_back_fresh
    async def decide_consent(
        self, consent_id: UUID, approve: bool, principal: str, now: datetime
    ) -> Consent | None:
        await enter()
        consent = self.consent_table.get(consent_id)
        if consent is None or consent.status is not ConsentStatus.PENDING:
            return consent
        decided = consent.model_copy(
            update={
                "status": ConsentStatus.APPROVED if approve else ConsentStatus.DENIED,
                "decided_by": principal,
                "decided_at": now,
            }
        )
        self.consent_table[consent_id] = decided
        return decided

    @hands_back_fresh
    async def cancel_consent(self, consent_id: UUID, now: datetime) -> Consent | None:
        await enter()
        consent = self.consent_table.get(consent_id)
        if consent is None or consent.status is not ConsentStatus.PENDING:
            return consent
        cancelled = consent.model_copy(update={"status": ConsentStatus.CANCELLED})
        self.consent_table[consent_id] = cancelled
        return cancelled

    @hands_back_fresh
    async def readmit_after_consent(
        self, run_id: UUID, consent_id: UUID, now: datetime
    ) -> RunDelivery | None:
        await enter()
        run = self.run_table.get(run_id)
        consent = self.consent_table.get(consent_id)
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
        return self._readmit(run, now)

    # -- delegation -------------------------------------------------------------

    @hands_back_fresh
    async def create_agent_job(self, job: AgentJob) -> AgentJob | None:
        await enter()
        existing = self.agent_job_table.get(job.id)
        if existing is not None:
            return existing
        if self._holds(job.run_id, job.seq, (RunStatus.RUNNING,)) is None:
            return None
        self.agent_job_table[job.id] = job
        return job

    @hands_back_fresh
    async def get_agent_job(self, job_id: UUID) -> AgentJob | None:
        await enter()
        return self.agent_job_table.get(job_id)

    @hands_back_fresh
    async def agent_jobs_of(self, run_id: UUID) -> list[AgentJob]:
        await enter()
        mine = [j for j in self.agent_job_table.values() if j.run_id == run_id]
        return sorted(mine, key=lambda j: (j.created_at, j.id))

    @hands_back_fresh
    async def record_agent_job(
        self,
        job_id: UUID,
        status: AgentJobStatus,
        result: dict[str, Any] | None,
        now: datetime,
    ) -> AgentJob | None:
        await enter()
        job = self.agent_job_table.get(job_id)
        if job is None:
            return None
        lost_contained = job.status is AgentJobStatus.LOST and status is AgentJobStatus.CANCELLED
        if job.status.terminal and not lost_contained:
            return job
        updated = job.model_copy(update={"status": status, "result": result, "updated_at": now})
        self.agent_job_table[job_id] = updated
        return updated

    @hands_back_fresh
    async def park_delegate(
        self, run_id: UUID, seq: int, job_id: UUID, now: datetime
    ) -> Run | None:
        await enter()
        run = self.run_table.get(run_id)
        if (
            run is not None
            and run.status is RunStatus.AWAITING_DELEGATE
            and run.agent_job_id == job_id
        ):
            return run
        job = self.agent_job_table.get(job_id)
        checkpoint = self.checkpoint_table.get(run_id)
        if (
            self._holds(run_id, seq, (RunStatus.RUNNING,)) is None
            or job is None
            or job.run_id != run_id
            or checkpoint is None
            or checkpoint.agent_job_id != job_id
        ):
            return None
        return self._park(run_id, seq, now, status=RunStatus.AWAITING_DELEGATE,
                          agent_job_id=job_id)

    @hands_back_fresh
    async def readmit_after_delegate(
        self, run_id: UUID, job_id: UUID, now: datetime
    ) -> RunDelivery | None:
        await enter()
        run = self.run_table.get(run_id)
        job = self.agent_job_table.get(job_id)
        if (
            run is None
            or run.status is not RunStatus.AWAITING_DELEGATE
            or run.agent_job_id != job_id
            or job is None
            or job.run_id != run_id
            or not job.status.terminal
        ):
            return None
        return self._readmit(run, now)

    # -- service waits ----------------------------------------------------------------

    def _owned_attempt(self, run_id: UUID, attempt_id: UUID) -> ServiceJobAttempt | None:
        attempt = self.services.attempt_table.get(attempt_id)
        if attempt is None or attempt.owner.run_id != run_id:
            return None
        return attempt

    @hands_back_fresh
    async def park_service(
        self, run_id: UUID, seq: int, attempt_id: UUID, now: datetime
    ) -> Run | None:
        await enter()
        run = self.run_table.get(run_id)
        if (
            run is not None
            and run.status is RunStatus.AWAITING_SERVICE
            and run.service_attempt_id == attempt_id
        ):
            return run  # repeated after an ambiguous commit
        checkpoint = self.checkpoint_table.get(run_id)
        if (
            self._holds(run_id, seq, (RunStatus.RUNNING,)) is None
            or self._owned_attempt(run_id, attempt_id) is None
            or checkpoint is None
            or checkpoint.service_attempt_id != attempt_id
        ):
            return None
        return self._park(run_id, seq, now, status=RunStatus.AWAITING_SERVICE,
                          service_attempt_id=attempt_id)

    @hands_back_fresh
    async def readmit_after_service(
        self, run_id: UUID, attempt_id: UUID, now: datetime
    ) -> RunDelivery | None:
        await enter()
        run = self.run_table.get(run_id)
        attempt = self._owned_attempt(run_id, attempt_id)
        if (
            run is None
            or run.status is not RunStatus.AWAITING_SERVICE
            or run.service_attempt_id != attempt_id
            or attempt is None
            or not attempt.state.terminal
        ):
            return None
        return self._readmit(run, now)

    # -- hardware -------------------------------------------------------------------

    @hands_back_fresh
    async def await_hardware(self, run_id: UUID, seq: int, now: datetime) -> Run | None:
        await enter()
        again = self._holds(run_id, seq, (RunStatus.AWAITING_HARDWARE,))
        if again is not None:
            return again  # repeated after an ambiguous commit
        run = self._holds(run_id, seq, (RunStatus.RUNNING,))
        if run is None:
            return None
        return self._put_run(run, status=RunStatus.AWAITING_HARDWARE, updated_at=now)

    @hands_back_fresh
    async def resume_hardware(self, run_id: UUID, seq: int, now: datetime) -> Run | None:
        await enter()
        again = self._holds(run_id, seq, (RunStatus.RUNNING,))
        if again is not None:
            return again  # repeated after an ambiguous commit
        run = self._holds(run_id, seq, (RunStatus.AWAITING_HARDWARE,))
        if run is None:
            return None
        return self._put_run(run, status=RunStatus.RUNNING, updated_at=now)

    # -- cancellation -----------------------------------------------------------------

    @hands_back_fresh
    async def begin_cancel(self, run_id: UUID, now: datetime) -> Run | None:
        await enter()
        run = self.run_table.get(run_id)
        if run is None or run.status.terminal or run.status is RunStatus.CANCELLING:
            return run
        return self._put_run(run, status=RunStatus.CANCELLING, updated_at=now)

    @hands_back_fresh
    async def finish_cancel(self, run_id: UUID, seq: int, now: datetime) -> Run | None:
        await enter()
        run = self.run_table.get(run_id)
        if run is not None and run.status is RunStatus.CANCELLED and run.seq == seq:
            return run
        run = self._holds(run_id, seq, (RunStatus.CANCELLING,))
        if run is None:
            return None
        d = self.delivery_table.get((run_id, seq))
        if d is not None and not d.state.closed:
            closed = DeliveryState.SETTLED if d.state is DeliveryState.CLAIMED \
                else DeliveryState.FAILED
            self._put_delivery(d, state=closed, updated_at=now)
        for cid, c in list(self.consent_table.items()):
            if c.run_id == run_id and c.status is ConsentStatus.PENDING:
                self.consent_table[cid] = c.model_copy(update={"status": ConsentStatus.CANCELLED})
        self.late_fence_owed.add(run_id)  # startup probes for a late hop job once
        return self._put_run(run, status=RunStatus.CANCELLED, updated_at=now)

    # -- shared writes ------------------------------------------------------------------

    def _park(self, run_id: UUID, seq: int, now: datetime, **changes: Any) -> Run:
        run = self.run_table[run_id]
        d = self.delivery_table[(run_id, seq)]
        self._put_delivery(d, state=DeliveryState.SETTLED, updated_at=now)
        return self._put_run(run, updated_at=now, **changes)

    def _readmit(self, run: Run, now: datetime) -> RunDelivery:
        prev = self.delivery_table[(run.id, run.seq)]
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
        self.delivery_table[(run.id, fresh.seq)] = fresh
        self._put_run(run, status=RunStatus.QUEUED, seq=fresh.seq, updated_at=now)
        return fresh
