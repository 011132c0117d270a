"""One ledger transaction on a pooled connection, and the row helpers every method uses.

`Transactional._transaction()` opens exactly one transaction (READ COMMITTED,
or a REPEATABLE READ read-only snapshot) and commits when its block ends
normally; `Transactional._statement()` runs each statement as a transaction
of its own (the pool's connections are autocommit). A lost connection, a
pool timeout or a serialization failure becomes `LedgerUnavailable`: the
outcome is unknown and the caller's bounded retry repeats the (idempotent)
method.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, Self
from uuid import UUID

import psycopg
from psycopg import AsyncCursor, sql
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, PoolClosed

from runtime.adapters.postgres.queries import SNAPSHOT
from runtime.adapters.postgres.rows import aware, delivery_from_row, run_from_row
from runtime.errors import LedgerUnavailable
from runtime.models import Run, RunDelivery

Cursor = AsyncCursor[DictRow]
Query = sql.SQL | sql.Composed

CONNECTION_LOST = (
    psycopg.OperationalError,
    # The server ends the session for these (SQLSTATE 25P03, 25P04), so the
    # connection is lost like any other; psycopg files them under InternalError.
    psycopg.errors.IdleInTransactionSessionTimeout,
    psycopg.errors.TransactionTimeout,
)


class LockDisciplineBroken(RuntimeError):
    """A conditional write found no row although its lock said it would: a bug, rolled back."""


class Transactional:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self._pool = pool

    async def close(self) -> None:
        await self._pool.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @asynccontextmanager
    async def _transaction(self, *, snapshot: bool = False) -> AsyncIterator[Cursor]:
        try:
            async with (
                self._pool.connection() as conn,
                conn.transaction(),
                conn.cursor(row_factory=dict_row) as cur,
            ):
                if snapshot:
                    await cur.execute(SNAPSHOT)
                yield cur
        except PoolClosed:
            raise
        except CONNECTION_LOST as exc:
            raise LedgerUnavailable(f"ledger transaction failed: {exc}") from exc


    @asynccontextmanager
    async def _statement(self) -> AsyncIterator[Cursor]:
        """A cursor whose every statement is its own transaction (autocommit): for a
        method that is one statement, this saves BEGIN's and COMMIT's round trips."""
        try:
            async with (
                self._pool.connection() as conn,
                conn.cursor(row_factory=dict_row) as cur,
            ):
                yield cur
        except PoolClosed:
            raise
        except CONNECTION_LOST as exc:
            raise LedgerUnavailable(f"ledger statement failed: {exc}") from exc


def key(run_id: UUID, seq: int, now: datetime) -> dict[str, Any]:
    return {"run_id": run_id, "seq": seq, "now": aware(now)}


async def one(cur: Cursor) -> DictRow:
    row = await cur.fetchone()
    if row is None:
        raise LockDisciplineBroken("a conditional write under a row lock matched no row")
    return row


async def maybe(cur: Cursor, query: Query, params: dict[str, Any]) -> DictRow | None:
    await cur.execute(query, params)
    return await cur.fetchone()


async def fetch_run(cur: Cursor, query: Query, run_id: UUID) -> Run | None:
    row = await maybe(cur, query, {"id": run_id})
    return None if row is None else run_from_row(row)


async def fetch_delivery(
    cur: Cursor, query: Query, run_id: UUID, seq: int
) -> RunDelivery | None:
    row = await maybe(cur, query, {"run_id": run_id, "seq": seq})
    return None if row is None else delivery_from_row(row)
