"""PostgresServiceStore: ServiceJobAttempt@1 on PostgreSQL (seed
000_81a5c720b14d934a.txt, "Service job attempts").

Table `service_job_attempt` from migration 0006. Each method is one READ
COMMITTED transaction: lock the attempt row (`FOR UPDATE`), apply the same
`runtime.service.rules` decision as the memory store, write the whole row
back when it changed. A refusal raises inside the transaction, which rolls
back: nothing is written. The idempotency key is UNIQUE, so two concurrent
`prepare` calls for one key cannot both insert; the loser re-reads and is
answered like a repeat (or refused when its payload differs). No statement
calls now(): every timestamp comes from the caller's Clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import sql
from psycopg.types.json import Jsonb

from runtime.adapters.postgres.pooled import PooledStore
from runtime.adapters.postgres.records import assignments, column_list, placeholders
from runtime.adapters.postgres.rows import aware
from runtime.adapters.postgres.tx import Cursor, maybe
from runtime.service import rules
from runtime.service.errors import UnknownAttempt
from runtime.service.models import Evidence, ServiceJobAttempt, ServiceOutcome, ServiceState

COLUMNS = (
    "id",
    "owner_job",
    "run_id",
    "station_attempt",
    "idempotency_key",
    "generation",
    "request",
    "request_digest",
    "binding",
    "envelope",
    "state",
    "provider_job_id",
    "progress_cursor",
    "result",
    "diagnostic",
    "usage",
    "transmissions",
    "cancel_requested_at",
    "evidence",
    "version",
    "created_at",
    "updated_at",
)
TERMINAL = [s.value for s in ServiceState if s.terminal]

_COLS = column_list(COLUMNS)
GET = sql.SQL("SELECT {cols} FROM service_job_attempt WHERE id = %(id)s").format(cols=_COLS)
LOCK = sql.SQL("SELECT {cols} FROM service_job_attempt WHERE id = %(id)s FOR UPDATE").format(
    cols=_COLS
)
GET_BY_KEY = sql.SQL(
    "SELECT {cols} FROM service_job_attempt WHERE idempotency_key = %(key)s"
).format(cols=_COLS)
LOCK_BY_KEY = sql.SQL(
    "SELECT {cols} FROM service_job_attempt WHERE idempotency_key = %(key)s FOR UPDATE"
).format(cols=_COLS)
OWNED_BY = sql.SQL(
    "SELECT {cols} FROM service_job_attempt WHERE run_id = %(run_id)s ORDER BY created_at, id"
).format(cols=_COLS)
INSERT = sql.SQL(
    "INSERT INTO service_job_attempt ({cols}) VALUES ({vals}) ON CONFLICT DO NOTHING RETURNING id"
).format(cols=_COLS, vals=placeholders(COLUMNS))
UPDATE = sql.SQL("UPDATE service_job_attempt SET {sets} WHERE id = %(id)s").format(
    sets=assignments(tuple(c for c in COLUMNS if c != "id"))
)
OPEN_FIRST = sql.SQL(
    "SELECT {cols} FROM service_job_attempt WHERE state <> ALL(%(terminal)s) "
    "ORDER BY created_at, id LIMIT %(limit)s"
).format(cols=_COLS)
OPEN_AFTER = sql.SQL(
    "SELECT {cols} FROM service_job_attempt WHERE state <> ALL(%(terminal)s) "
    "AND (created_at, id) > (%(after_at)s, %(after_id)s) "
    "ORDER BY created_at, id LIMIT %(limit)s"
).format(cols=_COLS)


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def params(a: ServiceJobAttempt) -> dict[str, Any]:
    dumped = a.model_dump(mode="json")
    return {
        "id": a.id,
        "owner_job": a.owner.job,
        "run_id": a.owner.run_id,
        "station_attempt": a.owner.station_attempt,
        "idempotency_key": a.idempotency_key,
        "generation": a.generation,
        "request": Jsonb(dumped["request"]),
        "request_digest": a.request_digest,
        "binding": Jsonb(dumped["binding"]),
        "envelope": Jsonb(dumped["envelope"]),
        "state": a.state.value,
        "provider_job_id": a.provider_job_id,
        "progress_cursor": a.progress_cursor,
        "result": _json(dumped["result"]),
        "diagnostic": _json(dumped["diagnostic"]),
        "usage": _json(dumped["usage"]),
        "transmissions": a.transmissions,
        "cancel_requested_at": None
        if a.cancel_requested_at is None
        else aware(a.cancel_requested_at),
        "evidence": Jsonb(dumped["evidence"]),
        "version": a.version,
        "created_at": aware(a.created_at),
        "updated_at": aware(a.updated_at),
    }


def from_row(row: dict[str, Any]) -> ServiceJobAttempt:
    fields = {c: row[c] for c in COLUMNS if c not in ("owner_job", "run_id", "station_attempt")}
    fields["owner"] = {
        "job": row["owner_job"],
        "run_id": row["run_id"],
        "station_attempt": row["station_attempt"],
    }
    return ServiceJobAttempt.model_validate(fields)


class PostgresServiceStore(PooledStore):
    """Build it with `await PostgresServiceStore.connect(dsn)`; close it when done."""

    async def _lock(self, cur: Cursor, attempt_id: UUID) -> ServiceJobAttempt:
        row = await maybe(cur, LOCK, {"id": attempt_id})
        if row is None:
            raise UnknownAttempt(attempt_id)
        return from_row(row)

    async def _change(
        self, attempt_id: UUID, decide: Callable[..., ServiceJobAttempt], *args: Any
    ) -> ServiceJobAttempt:
        async with self._transaction() as cur:
            stored = await self._lock(cur, attempt_id)
            new = decide(stored, *args)
            if new != stored:
                await cur.execute(UPDATE, params(new))
            return new

    async def prepare(self, attempt: ServiceJobAttempt) -> ServiceJobAttempt:
        for _ in range(2):  # the second pass sees what a concurrent prepare committed
            async with self._transaction() as cur:
                by_id = await maybe(cur, LOCK, {"id": attempt.id})
                by_key = await maybe(cur, LOCK_BY_KEY, {"key": attempt.idempotency_key})
                stored = rules.decide_prepare(
                    attempt,
                    None if by_id is None else from_row(by_id),
                    None if by_key is None else from_row(by_key),
                )
                if stored is not None:
                    return stored
                await cur.execute(INSERT, params(attempt))
                if await cur.fetchone() is not None:
                    return attempt
        raise AssertionError("prepare raced twice on an existing attempt")  # pragma: no cover

    async def get(self, attempt_id: UUID) -> ServiceJobAttempt | None:
        async with self._transaction() as cur:
            row = await maybe(cur, GET, {"id": attempt_id})
            return None if row is None else from_row(row)

    async def by_key(self, idempotency_key: str) -> ServiceJobAttempt | None:
        async with self._transaction() as cur:
            row = await maybe(cur, GET_BY_KEY, {"key": idempotency_key})
            return None if row is None else from_row(row)

    async def owned_by(self, run_id: UUID) -> list[ServiceJobAttempt]:
        async with self._transaction() as cur:
            await cur.execute(OWNED_BY, {"run_id": run_id})
            return [from_row(r) for r in await cur.fetchall()]

    async def begin_submit(self, attempt_id: UUID, now: datetime) -> ServiceJobAttempt:
        return await self._change(attempt_id, rules.decide_begin_submit, now)

    async def begin_resubmit(
        self, attempt_id: UUID, proof: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        return await self._change(attempt_id, rules.decide_begin_resubmit, proof, now)

    async def accept(
        self, attempt_id: UUID, provider_job_id: str, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        return await self._change(attempt_id, rules.decide_accept, provider_job_id, evidence, now)

    async def mark_running(
        self, attempt_id: UUID, progress_cursor: str | None, now: datetime
    ) -> ServiceJobAttempt:
        return await self._change(attempt_id, rules.decide_running, progress_cursor, now)

    async def mark_indeterminate(
        self, attempt_id: UUID, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        return await self._change(attempt_id, rules.decide_indeterminate, evidence, now)

    async def settle(
        self, attempt_id: UUID, outcome: ServiceOutcome, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        return await self._change(attempt_id, rules.decide_settle, outcome, evidence, now)

    async def request_cancel(self, attempt_id: UUID, now: datetime) -> ServiceJobAttempt:
        return await self._change(attempt_id, rules.decide_request_cancel, now)

    async def add_evidence(
        self, attempt_id: UUID, evidence: Evidence, now: datetime
    ) -> ServiceJobAttempt:
        return await self._change(attempt_id, rules.decide_add_evidence, evidence, now)

    async def open_attempts(
        self, after: tuple[datetime, UUID] | None, limit: int
    ) -> list[ServiceJobAttempt]:
        if limit < 0:
            raise ValueError("limit must not be negative")
        async with self._transaction() as cur:
            if after is None:
                await cur.execute(OPEN_FIRST, {"terminal": TERMINAL, "limit": limit})
            else:
                await cur.execute(
                    OPEN_AFTER,
                    {
                        "terminal": TERMINAL,
                        "limit": limit,
                        "after_at": aware(after[0]),
                        "after_id": after[1],
                    },
                )
            return [from_row(r) for r in await cur.fetchall()]
