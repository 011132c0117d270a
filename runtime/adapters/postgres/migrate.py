"""Apply the shipped migrations: `migrate(dsn)`, and the version check every ledger runs.

Guarantees:
- Each migration is one transaction together with its `schema_version` row,
  taken under a transaction-scoped advisory lock, so concurrent migrators
  apply each migration exactly once and a failure leaves the previous version.
- Running `migrate` again once the schema is current changes nothing.
- A database whose recorded version is newer than the newest shipped
  migration is refused (`SchemaTooNew`, naming both versions) and not touched.
- A migration declaring `-- requires: no-nonterminal-runs` takes ACCESS
  EXCLUSIVE on `run`, refuses while any nonterminal Run exists, and keeps
  that lock through its DDL until commit, so no writer can create ambiguous
  work between the check and the outbox change (seed 000_81a5c720b14d934a.txt,
  "Admission and exact claim").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from runtime.adapters.postgres.catalog import NO_NONTERMINAL_RUNS, Migration, shipped
from runtime.adapters.postgres.connect import DEFAULT_CONNECT_TIMEOUT_S, probe
from runtime.adapters.postgres.errors import MigrationRefused, SchemaTooNew, SchemaTooOld
from runtime.adapters.system import SystemClock
from runtime.models import TERMINAL_STATUSES
from runtime.seams import Clock

MIGRATION_LOCK_KEY = 0x7665_7373_656C_0001
"""pg_advisory_xact_lock key that serialises migrators of one database."""

SHOWN_RUN_IDS = 5
TERMINAL = tuple(sorted(s.value for s in TERMINAL_STATUSES))

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version    integer     PRIMARY KEY CHECK (version > 0),
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL
)
"""

Conn = AsyncConnection[Any]


@dataclass(frozen=True)
class MigrationReport:
    before: int
    after: int
    applied: tuple[int, ...]


async def read_version(conn: Conn) -> int:
    """The recorded schema version; 0 for a database never migrated."""
    cur = await conn.execute("SELECT to_regclass('schema_version') IS NOT NULL")
    row = await cur.fetchone()
    if row is None or not row[0]:
        return 0
    cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def require_current(conn: Conn, code_version: int | None = None) -> int:
    """Raise unless the database schema is exactly this code's newest version."""
    newest = latest(shipped()) if code_version is None else code_version
    found = await read_version(conn)
    await conn.rollback()
    if found > newest:
        raise SchemaTooNew(found, newest)
    if found < newest:
        raise SchemaTooOld(found, newest)
    return found


async def migrate(
    dsn: str,
    *,
    target: int | None = None,
    clock: Clock | None = None,
    timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    lock_timeout_s: float = 30.0,
    migrations: Sequence[Migration] | None = None,
) -> MigrationReport:
    """Bring the database at `dsn` to `target` (default: the newest shipped migration)."""
    plan = tuple(shipped() if migrations is None else migrations)
    newest = latest(plan)
    goal = newest if target is None else target
    if not 0 <= goal <= newest:
        raise ValueError(f"target version {goal} is outside the shipped range 0..{newest}")
    now = (clock or SystemClock()).now
    conn = await probe(dsn, timeout_s)
    async with conn:
        before = await read_version(conn)
        await conn.rollback()
        if before > newest:
            raise SchemaTooNew(before, newest)
        applied: list[int] = []
        while True:
            async with conn.transaction():
                await conn.execute(
                    "SELECT set_config('lock_timeout', %s, true)",
                    (f"{int(lock_timeout_s * 1000)}ms",),
                )
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
                await conn.execute(VERSION_TABLE)
                current = await read_version(conn)
                if current > newest:
                    raise SchemaTooNew(current, newest)
                if current >= goal:
                    return MigrationReport(before, current, tuple(applied))
                step = plan[current]
                if NO_NONTERMINAL_RUNS in step.requires:
                    await _refuse_live_runs(conn, step)
                await conn.execute(step.sql.encode())  # several statements, no parameters
                await conn.execute(
                    "INSERT INTO schema_version (version, name, applied_at) VALUES (%s, %s, %s)",
                    (step.version, step.name, now()),
                )
            applied.append(step.version)


def latest(migrations: Sequence[Migration]) -> int:
    return migrations[-1].version if migrations else 0


async def _refuse_live_runs(conn: Conn, step: Migration) -> None:
    """Lock `run` for the rest of the transaction and refuse while any Run is live."""
    cur = await conn.execute("SELECT to_regclass('run') IS NOT NULL")
    row = await cur.fetchone()
    if row is None or not row[0]:
        return  # no run table yet: there can be no legacy Run
    await conn.execute("LOCK TABLE run IN ACCESS EXCLUSIVE MODE")
    cur = await conn.execute(
        "SELECT id, count(*) OVER () FROM run WHERE status <> ALL(%s) "
        "ORDER BY created_at, id LIMIT %s",
        (list(TERMINAL), SHOWN_RUN_IDS),
    )
    rows = await cur.fetchall()
    if rows:
        count = int(rows[0][1])
        raise MigrationRefused(
            step.version,
            step.name,
            f"{count} nonterminal Run(s) exist and their current hop cannot be classified "
            "as fresh or resumed; let them finish or cancel them, then migrate again",
            [r[0] for r in rows],
        )
