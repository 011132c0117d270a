"""The Ledger implementations the contract suite runs against, and their lifecycles.

"memory" always runs (on asyncio and trio); "postgres" runs on a fresh,
migrated database per test, on asyncio only: psycopg's AsyncConnection does
not run under trio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from runtime.adapters.memory import MemoryLedger
from runtime.adapters.postgres import PostgresLedger, migrate
from runtime.seams import Ledger

TRIO_SKIP = "psycopg's AsyncConnection does not run under trio; PostgreSQL runs on asyncio only"

LEDGER_KINDS = [
    pytest.param("memory", id="memory"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@asynccontextmanager
async def postgres_ledger(dsn: str, max_size: int = 8) -> AsyncIterator[PostgresLedger]:
    """Migrate `dsn` and yield a connected ledger; closed on exit."""
    await migrate(dsn)
    ledger = await PostgresLedger.connect(dsn, max_size=max_size)
    try:
        yield ledger
    finally:
        await ledger.close()


@asynccontextmanager
async def open_ledger(
    kind: str, request: pytest.FixtureRequest, backend: str
) -> AsyncIterator[Ledger]:
    if kind == "memory":
        yield MemoryLedger()
        return
    if backend != "asyncio":
        pytest.skip(TRIO_SKIP)
    dsn = request.getfixturevalue("pg_fresh_dsn")
    async with postgres_ledger(dsn) as ledger:
        yield ledger
