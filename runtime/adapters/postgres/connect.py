"""Bounded connection to PostgreSQL: one clear error, never a hang or a leaked pool.

`probe` opens a single connection under a hard deadline so a refused,
unreachable or black-holed server fails with the driver's own reason.
`open_pool` opens an `AsyncConnectionPool` and waits for its first
connections under the same bound; if that fails the pool is closed before
the error propagates.
"""

from __future__ import annotations

import math

import anyio
import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from runtime.adapters.postgres.errors import ConnectFailed

DEFAULT_CONNECT_TIMEOUT_S = 5.0


def describe(dsn: str) -> str:
    """The DSN's target without secrets, for error messages: user@host:port/dbname."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    host = parts.get("host") or parts.get("hostaddr") or "<default host>"
    port = parts.get("port") or "5432"
    user = parts.get("user") or "<default user>"
    dbname = parts.get("dbname") or "<default database>"
    return f"{user}@{host}:{port}/{dbname}"


def libpq_timeout(timeout_s: float) -> int:
    """libpq's connect_timeout is whole seconds, and it treats values below 2 as 2."""
    return max(2, math.ceil(timeout_s))


async def probe(
    dsn: str, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
) -> AsyncConnection[tuple[object, ...]]:
    """Open one connection within `timeout_s`, or raise ConnectFailed with the reason."""
    target = describe(dsn)
    try:
        with anyio.fail_after(timeout_s):
            return await AsyncConnection.connect(dsn, connect_timeout=libpq_timeout(timeout_s))
    except TimeoutError:
        raise ConnectFailed(target, timeout_s, "timed out") from None
    except psycopg.Error as exc:
        raise ConnectFailed(target, timeout_s, _first_line(exc)) from exc


async def open_pool(
    dsn: str,
    *,
    min_size: int,
    max_size: int,
    timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    acquire_timeout_s: float = 10.0,
) -> AsyncConnectionPool:
    """An open pool with `min_size` live connections, or ConnectFailed and no pool."""
    pool = AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        open=False,
        timeout=acquire_timeout_s,
        # Autocommit: `Transactional._transaction` still opens one transaction per
        # block (BEGIN ... COMMIT), and `_statement` runs one statement as its own
        # transaction, without those two round trips (issue 17, client CPU).
        kwargs={"connect_timeout": libpq_timeout(timeout_s), "autocommit": True},
        name="vessel-ledger",
    )
    try:
        await pool.open(wait=True, timeout=timeout_s)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await pool.close()
        if isinstance(exc, psycopg.Error):
            raise ConnectFailed(describe(dsn), timeout_s, _first_line(exc)) from exc
        raise
    return pool


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
