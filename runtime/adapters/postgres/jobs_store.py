"""PostgresJobStore: the JobStore seam on PostgreSQL (seed 004_85033eb8fc772f12.txt).

Tables from migration 0005_leased_jobs. Each method is one READ COMMITTED
transaction that locks the job row (`FOR UPDATE`), reads what the rule
needs, applies the same `runtime.jobs.rules` decision as the memory store,
writes it, commits, and only then raises the decision's refusal, so a
refused stage still keeps the usage it returned while the job stays as it
was. `claim_one` picks candidates with `FOR UPDATE SKIP LOCKED`, so
concurrent workers never wait on each other's rows and never share a job.
No statement calls now(): every timestamp comes from the caller's Clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from runtime.adapters.attempt_endings import AttemptEndings
from runtime.adapters.postgres.pooled import PooledStore
from runtime.adapters.postgres.records import (
    assignments,
    column_list,
    from_row,
    placeholders,
    to_params,
)
from runtime.adapters.postgres.rows import aware
from runtime.adapters.postgres.tx import Cursor, maybe
from runtime.jobs import rules
from runtime.jobs.errors import UnknownJob
from runtime.jobs.models import (
    RENEW_EVERY_S,
    AttemptEvent,
    EventKind,
    EvidenceRecord,
    Interpretation,
    LeasedJob,
    StagedResult,
)

EVIDENCE_COLUMNS = ("id", "workspace", "media_type", "payload", "digest", "received_at")
JOB_COLUMNS = tuple(LeasedJob.model_fields)
INTERPRETATION_COLUMNS = tuple(Interpretation.model_fields)
EVENT_COLUMNS = (
    "job_id",
    "idx",
    "kind",
    "fence",
    "worker",
    "interpretation",
    "call",
    "usage",
    "refused",
    "detail",
    "at",
)
EVENT_RENAMES = {"idx": "index"}
CLAIM_SCAN_LIMIT = 64
"""Candidates one claim may exhaust before giving up (each exhausted one is written)."""

_JOB = column_list(JOB_COLUMNS)
_EVIDENCE = column_list(EVIDENCE_COLUMNS)

GET_JOB = sql.SQL("SELECT {cols} FROM leased_job WHERE id = %(id)s").format(cols=_JOB)
LOCK_JOB = sql.SQL("SELECT {cols} FROM leased_job WHERE id = %(id)s FOR UPDATE").format(cols=_JOB)
JOBS_OF = sql.SQL(
    "SELECT {cols} FROM leased_job WHERE workspace = %(workspace)s ORDER BY created_at, id"
).format(cols=_JOB)
INSERT_JOB = sql.SQL(
    "INSERT INTO leased_job ({cols}) VALUES ({vals}) ON CONFLICT (id) DO NOTHING RETURNING id"
).format(cols=_JOB, vals=placeholders(JOB_COLUMNS))
UPDATE_JOB = sql.SQL("UPDATE leased_job SET {sets} WHERE id = %(id)s RETURNING id").format(
    sets=assignments(tuple(c for c in JOB_COLUMNS if c != "id"))
)
NEXT_CANDIDATE = sql.SQL(
    "SELECT {cols} FROM leased_job WHERE workspace = %(workspace)s "
    "AND (state = 'queued' OR (state = 'retry_scheduled' AND retry_at <= %(now)s)) "
    "AND (lease_expires_at IS NULL OR lease_expires_at <= %(now)s) "
    "ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
).format(cols=_JOB)

GET_EVIDENCE = sql.SQL("SELECT {cols} FROM job_evidence WHERE id = %(id)s").format(cols=_EVIDENCE)
LOCK_EVIDENCE = sql.SQL("SELECT {cols} FROM job_evidence WHERE id = %(id)s FOR UPDATE").format(
    cols=_EVIDENCE
)
INSERT_EVIDENCE = sql.SQL(
    "INSERT INTO job_evidence ({cols}) VALUES ({vals}) ON CONFLICT (id) DO NOTHING RETURNING id"
).format(cols=_EVIDENCE, vals=placeholders(EVIDENCE_COLUMNS))

INSERT_EVENT = sql.SQL("INSERT INTO leased_job_event ({cols}) VALUES ({vals})").format(
    cols=column_list(EVENT_COLUMNS), vals=placeholders(EVENT_COLUMNS)
)
NEXT_EVENT = sql.SQL(
    "SELECT coalesce(max(idx) + 1, 0) AS next FROM leased_job_event WHERE job_id = %(id)s"
).format()
EVENTS_OF = sql.SQL(
    "SELECT {cols} FROM leased_job_event WHERE job_id = %(id)s ORDER BY idx"
).format(cols=column_list(EVENT_COLUMNS))
STARTED_INTERPRETATION = sql.SQL(
    "SELECT interpretation FROM leased_job_event WHERE job_id = %(id)s AND fence = %(fence)s "
    "AND kind = %(kind)s ORDER BY idx DESC LIMIT 1"
).format()

INSERT_INTERPRETATION = sql.SQL(
    "INSERT INTO leased_job_interpretation ({cols}) VALUES ({vals})"
).format(cols=column_list(INTERPRETATION_COLUMNS), vals=placeholders(INTERPRETATION_COLUMNS))
INTERPRETATIONS_OF = sql.SQL(
    "SELECT {cols} FROM leased_job_interpretation WHERE job_id = %(id)s ORDER BY number"
).format(cols=column_list(INTERPRETATION_COLUMNS))


def _job(row: dict[str, Any]) -> LeasedJob:
    return from_row(LeasedJob, row, JOB_COLUMNS)


def _evidence(row: dict[str, Any]) -> EvidenceRecord:
    return from_row(EvidenceRecord, row, EVIDENCE_COLUMNS)


class PostgresJobStore(AttemptEndings, PooledStore):
    """Build it with `await PostgresJobStore.connect(dsn)`; close it when done."""

    def __init__(self, pool: AsyncConnectionPool, renew_every_s: float = RENEW_EVERY_S) -> None:
        super().__init__(pool)
        self.renew_every_s = renew_every_s

    # -- helpers (inside one transaction) -----------------------------------------

    async def _lock(self, cur: Cursor, job_id: UUID) -> LeasedJob:
        row = await maybe(cur, LOCK_JOB, {"id": job_id})
        if row is None:
            raise UnknownJob(job_id)
        return _job(row)

    async def _next_event(self, cur: Cursor, job_id: UUID) -> int:
        row = await maybe(cur, NEXT_EVENT, {"id": job_id})
        return 0 if row is None else int(row["next"])

    async def _call_interpretation(self, cur: Cursor, job: LeasedJob, fence: int) -> int:
        """The interpretation the attempt of `fence` worked on (its `started` event)."""
        row = await maybe(
            cur,
            STARTED_INTERPRETATION,
            {"id": job.id, "fence": fence, "kind": EventKind.STARTED.value},
        )
        return job.interpretation if row is None else int(row["interpretation"])

    async def _write(self, cur: Cursor, decision: rules.Decision) -> None:
        if decision.changed:
            await cur.execute(UPDATE_JOB, to_params(decision.job, JOB_COLUMNS))
        for event in decision.events:
            await cur.execute(INSERT_EVENT, to_params(event, EVENT_COLUMNS, EVENT_RENAMES))
        if decision.interpretation is not None:
            await cur.execute(
                INSERT_INTERPRETATION, to_params(decision.interpretation, INTERPRETATION_COLUMNS)
            )

    # -- JobStore ---------------------------------------------------------------------

    async def receive(self, evidence: EvidenceRecord, job: LeasedJob) -> LeasedJob:
        for _ in range(2):  # a second pass sees the row a concurrent receipt committed
            async with self._transaction() as cur:
                e_row = await maybe(cur, LOCK_EVIDENCE, {"id": evidence.id})
                j_row = await maybe(cur, LOCK_JOB, {"id": job.id})
                stored_job = None if j_row is None else _job(j_row)
                new_evidence, new_job = rules.decide_receive(
                    evidence, job, None if e_row is None else _evidence(e_row), stored_job
                )
                raced = False
                if new_evidence:
                    await cur.execute(INSERT_EVIDENCE, to_params(evidence, EVIDENCE_COLUMNS))
                    raced = await cur.fetchone() is None
                if new_job and not raced:
                    await cur.execute(INSERT_JOB, to_params(job, JOB_COLUMNS))
                    raced = await cur.fetchone() is None
                if not raced:
                    return job if stored_job is None else stored_job
        raise AssertionError("a receipt raced twice on ids that exist")  # pragma: no cover

    async def get(self, job_id: UUID) -> LeasedJob | None:
        async with self._transaction() as cur:
            row = await maybe(cur, GET_JOB, {"id": job_id})
            return None if row is None else _job(row)

    async def evidence(self, evidence_id: UUID) -> EvidenceRecord | None:
        async with self._transaction() as cur:
            row = await maybe(cur, GET_EVIDENCE, {"id": evidence_id})
            return None if row is None else _evidence(row)

    async def jobs(self, workspace: str) -> list[LeasedJob]:
        async with self._transaction() as cur:
            await cur.execute(JOBS_OF, {"workspace": workspace})
            return [_job(r) for r in await cur.fetchall()]

    async def claim_one(
        self, workspace: str, worker_id: str, now: datetime, lease_s: float
    ) -> LeasedJob | None:
        async with self._transaction() as cur:
            for _ in range(CLAIM_SCAN_LIMIT):
                row = await maybe(cur, NEXT_CANDIDATE, {"workspace": workspace, "now": aware(now)})
                if row is None:
                    return None
                job = _job(row)
                decision = rules.decide_claim(
                    job, worker_id, now, lease_s, await self._next_event(cur, job.id)
                )
                await self._write(cur, decision)
                if decision.job.lease_owner == worker_id:
                    return decision.job
        return None

    async def renew(self, job_id: UUID, fence: int, owner: str, now: datetime) -> LeasedJob:
        async with self._transaction() as cur:
            job = await self._lock(cur, job_id)
            decision = rules.decide_renew(job, fence, owner, now, self.renew_every_s)
            await self._write(cur, decision)
        return decision.outcome()

    async def reserve_model_call(
        self, job_id: UUID, fence: int, owner: str, now: datetime
    ) -> LeasedJob:
        async with self._transaction() as cur:
            job = await self._lock(cur, job_id)
            decision = rules.decide_reserve(
                job, fence, owner, now, await self._next_event(cur, job_id)
            )
            await self._write(cur, decision)
        return decision.outcome()

    async def stage(
        self,
        job_id: UUID,
        fence: int,
        owner: str,
        model_version: str,
        result: StagedResult,
        now: datetime,
    ) -> LeasedJob:
        async with self._transaction() as cur:
            job = await self._lock(cur, job_id)
            row = await maybe(
                cur,
                STARTED_INTERPRETATION,
                {"id": job_id, "fence": fence, "kind": EventKind.STARTED.value},
            )
            started = job.interpretation if row is None else int(row["interpretation"])
            decision = rules.decide_stage(
                job,
                fence,
                owner,
                model_version,
                result,
                now,
                await self._next_event(cur, job_id),
                started,
            )
            await self._write(cur, decision)
        return decision.outcome()

    async def _end_attempt(
        self, decide: Callable[..., rules.Decision], job_id: UUID, fence: int, owner: str,
        *args: Any,
    ) -> LeasedJob:
        """One transaction: lock the job, let `decide` end the fence's attempt (with the
        next event index and the interpretation its call served), write the decision."""
        async with self._transaction() as cur:
            job = await self._lock(cur, job_id)
            decision = decide(job, fence, owner, *args, await self._next_event(cur, job_id),
                              await self._call_interpretation(cur, job, fence))
            await self._write(cur, decision)
        return decision.outcome()

    async def reprocess(self, job_id: UUID, now: datetime) -> LeasedJob:
        async with self._transaction() as cur:
            decision = rules.decide_reprocess(await self._lock(cur, job_id), now)
            await self._write(cur, decision)
        return decision.outcome()

    async def withdraw(self, job_id: UUID, reason: str, now: datetime) -> LeasedJob:
        async with self._transaction() as cur:
            job = await self._lock(cur, job_id)
            decision = rules.decide_withdraw(job, reason, now, await self._next_event(cur, job_id))
            await self._write(cur, decision)
        return decision.outcome()

    async def interpretations(self, job_id: UUID) -> list[Interpretation]:
        async with self._transaction() as cur:
            await cur.execute(INTERPRETATIONS_OF, {"id": job_id})
            return [
                from_row(Interpretation, r, INTERPRETATION_COLUMNS) for r in await cur.fetchall()
            ]

    async def attempts(self, job_id: UUID) -> list[AttemptEvent]:
        async with self._transaction() as cur:
            await cur.execute(EVENTS_OF, {"id": job_id})
            return [
                from_row(AttemptEvent, r, EVENT_COLUMNS, EVENT_RENAMES)
                for r in await cur.fetchall()
            ]
