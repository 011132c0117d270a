"""MemoryJobStore: the reference JobStore (seed 004_85033eb8fc772f12.txt).

Each method passes the `enter()` gate once and then reads, decides (with
`runtime.jobs.rules`) and writes without awaiting, so it is one atomic
transaction under anyio, and a crashed simulated process can never write.
Test/local process state only: nothing survives the process.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from runtime.adapters.attempt_endings import AttemptEndings
from runtime.adapters.memory.fresh import hands_back_fresh
from runtime.adapters.memory.gate import enter
from runtime.jobs import rules
from runtime.jobs.errors import UnknownJob
from runtime.jobs.models import (
    RENEW_EVERY_S,
    AttemptEvent,
    EvidenceRecord,
    Interpretation,
    LeasedJob,
    StagedResult,
)


class MemoryJobStore(AttemptEndings):
    def __init__(self, renew_every_s: float = RENEW_EVERY_S) -> None:
        self.renew_every_s = renew_every_s
        self.evidence_table: dict[UUID, EvidenceRecord] = {}
        self.job_table: dict[UUID, LeasedJob] = {}
        self.interpretation_table: dict[UUID, list[Interpretation]] = {}
        self.event_log: dict[UUID, list[AttemptEvent]] = {}

    def _job(self, job_id: UUID) -> LeasedJob:
        job = self.job_table.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        return job

    def _apply(self, decision: rules.Decision) -> LeasedJob:
        job = decision.job
        if decision.changed:
            self.job_table[job.id] = job
        if decision.events:
            self.event_log.setdefault(job.id, []).extend(decision.events)
        if decision.interpretation is not None:
            self.interpretation_table.setdefault(job.id, []).append(decision.interpretation)
        return decision.outcome()

    def _next_event(self, job_id: UUID) -> int:
        return len(self.event_log.get(job_id, ()))

    def _call_interpretation(self, job: LeasedJob, fence: int) -> int:
        return rules.interpretation_of(self.event_log.get(job.id, ()), fence, job.interpretation)

    @hands_back_fresh
    async def receive(self, evidence: EvidenceRecord, job: LeasedJob) -> LeasedJob:
        await enter()
        new_evidence, new_job = rules.decide_receive(
            evidence, job, self.evidence_table.get(evidence.id), self.job_table.get(job.id)
        )
        if new_evidence:
            self.evidence_table[evidence.id] = evidence
        if new_job:
            self.job_table[job.id] = job
        return self.job_table[job.id]

    @hands_back_fresh
    async def get(self, job_id: UUID) -> LeasedJob | None:
        await enter()
        return self.job_table.get(job_id)

    @hands_back_fresh
    async def evidence(self, evidence_id: UUID) -> EvidenceRecord | None:
        await enter()
        return self.evidence_table.get(evidence_id)

    @hands_back_fresh
    async def jobs(self, workspace: str) -> list[LeasedJob]:
        await enter()
        mine = [j for j in self.job_table.values() if j.workspace == workspace]
        return sorted(mine, key=lambda j: (j.created_at, j.id))

    @hands_back_fresh
    async def claim_one(
        self, workspace: str, worker_id: str, now: datetime, lease_s: float
    ) -> LeasedJob | None:
        await enter()
        candidates = sorted(
            (j for j in self.job_table.values() if j.workspace == workspace and j.eligible_at(now)),
            key=lambda j: (j.created_at, j.id),
        )
        for job in candidates:
            decision = rules.decide_claim(job, worker_id, now, lease_s, self._next_event(job.id))
            claimed = self._apply(decision)
            if claimed.lease_owner == worker_id:
                return claimed
        return None

    @hands_back_fresh
    async def renew(self, job_id: UUID, fence: int, owner: str, now: datetime) -> LeasedJob:
        await enter()
        return self._apply(
            rules.decide_renew(self._job(job_id), fence, owner, now, self.renew_every_s)
        )

    @hands_back_fresh
    async def reserve_model_call(
        self, job_id: UUID, fence: int, owner: str, now: datetime
    ) -> LeasedJob:
        await enter()
        job = self._job(job_id)
        return self._apply(rules.decide_reserve(job, fence, owner, now, self._next_event(job_id)))

    @hands_back_fresh
    async def stage(
        self,
        job_id: UUID,
        fence: int,
        owner: str,
        model_version: str,
        result: StagedResult,
        now: datetime,
    ) -> LeasedJob:
        await enter()
        job = self._job(job_id)
        events = self.event_log.get(job_id, [])
        decision = rules.decide_stage(
            job,
            fence,
            owner,
            model_version,
            result,
            now,
            len(events),
            rules.interpretation_of(events, fence, job.interpretation),
        )
        return self._apply(decision)

    async def _end_attempt(
        self, decide: Callable[..., rules.Decision], job_id: UUID, fence: int, owner: str,
        *args: Any,
    ) -> LeasedJob:
        """Let `decide` end the fence's attempt (with the next event index and the
        interpretation its call served) and apply it, in one gated transaction."""
        await enter()
        job = self._job(job_id)
        return self._apply(decide(job, fence, owner, *args, self._next_event(job_id),
                                  self._call_interpretation(job, fence)))

    @hands_back_fresh
    async def reprocess(self, job_id: UUID, now: datetime) -> LeasedJob:
        await enter()
        return self._apply(rules.decide_reprocess(self._job(job_id), now))

    @hands_back_fresh
    async def withdraw(self, job_id: UUID, reason: str, now: datetime) -> LeasedJob:
        await enter()
        return self._apply(
            rules.decide_withdraw(self._job(job_id), reason, now, self._next_event(job_id))
        )

    @hands_back_fresh
    async def interpretations(self, job_id: UUID) -> list[Interpretation]:
        await enter()
        return list(self.interpretation_table.get(job_id, ()))

    @hands_back_fresh
    async def attempts(self, job_id: UUID) -> list[AttemptEvent]:
        await enter()
        return list(self.event_log.get(job_id, ()))
