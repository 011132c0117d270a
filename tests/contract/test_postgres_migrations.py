"""Schema migrations of the PostgreSQL ledger (runtime/adapters/postgres/migrate.py).

The outbox rule is seed 000_81a5c720b14d934a.txt, "Admission and exact
claim": installing or removing the delivery outbox refuses legacy live Runs
and holds ACCESS EXCLUSIVE on run through the check and the DDL.
"""

from __future__ import annotations

from functools import partial

import anyio
import psycopg
import pytest

from runtime.adapters.postgres import (
    MigrationRefused,
    PostgresLedger,
    SchemaTooNew,
    SchemaTooOld,
    latest_version,
    migrate,
)
from runtime.adapters.postgres.catalog import NO_NONTERMINAL_RUNS, Migration, build, shipped
from runtime.adapters.postgres.errors import InvalidMigrations
from runtime.adapters.postgres.rows import run_params
from runtime.models import RunStatus
from tests.contract.ledger_records import make_run, uid

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg's AsyncConnection does not run under trio


def insert_run(dsn: str, n: int, status: RunStatus) -> None:
    """A Run row as the schema at hand has it: columns of later migrations left out."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            b"SELECT column_name FROM information_schema.columns WHERE table_name = 'run'"
        ).fetchall()
        present = {r[0] for r in rows}
        params = {k: v for k, v in run_params(make_run(uid(n), status=status)).items()
                  if k in present}
        columns = ", ".join(params)
        values = ", ".join(f"%({c})s" for c in params)
        conn.execute(f"INSERT INTO run ({columns}) VALUES ({values})".encode(), params)


def scalar(dsn: str, query: str) -> object:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(query.encode()).fetchone()
        return None if row is None else row[0]


async def test_migrate_applies_every_migration_once(pg_fresh_dsn: str) -> None:
    first = await migrate(pg_fresh_dsn)
    assert (first.before, first.after) == (0, latest_version())
    assert first.applied == tuple(range(1, latest_version() + 1))
    second = await migrate(pg_fresh_dsn)
    assert (second.before, second.after, second.applied) == (latest_version(),) * 2 + ((),)
    assert scalar(pg_fresh_dsn, "SELECT count(*) FROM schema_version") == latest_version()


async def test_concurrent_migrators_apply_each_migration_once(pg_fresh_dsn: str) -> None:
    reports = []

    async def run() -> None:
        reports.append(await migrate(pg_fresh_dsn))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(run)
    applied = sorted(v for r in reports for v in r.applied)
    assert applied == list(range(1, latest_version() + 1))
    assert {r.after for r in reports} == {latest_version()}


async def test_a_newer_schema_is_refused_naming_both_versions(pg_fresh_dsn: str) -> None:
    await migrate(pg_fresh_dsn)
    newer = latest_version() + 7
    with psycopg.connect(pg_fresh_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO schema_version (version, name, applied_at) VALUES (%s, 'future', now())",
            (newer,),
        )
    with pytest.raises(SchemaTooNew) as refused:
        await migrate(pg_fresh_dsn)
    message = str(refused.value)
    assert f"version {newer}" in message and f"is {latest_version()}" in message
    with pytest.raises(SchemaTooNew):
        await PostgresLedger.connect(pg_fresh_dsn)


async def test_the_ledger_refuses_an_unmigrated_database(pg_fresh_dsn: str) -> None:
    with pytest.raises(SchemaTooOld, match="vessel migrate"):
        await PostgresLedger.connect(pg_fresh_dsn)
    await migrate(pg_fresh_dsn, target=1)
    with pytest.raises(SchemaTooOld, match="version 1"):
        await PostgresLedger.connect(pg_fresh_dsn)


async def test_outbox_migration_refuses_live_legacy_runs(pg_fresh_dsn: str) -> None:
    outbox = next(m for m in shipped() if NO_NONTERMINAL_RUNS in m.requires)
    await migrate(pg_fresh_dsn, target=outbox.version - 1)
    insert_run(pg_fresh_dsn, 1, RunStatus.DONE)
    insert_run(pg_fresh_dsn, 2, RunStatus.RUNNING)
    with pytest.raises(MigrationRefused) as refused:
        await migrate(pg_fresh_dsn)
    assert refused.value.version == outbox.version
    assert refused.value.run_ids == (uid(2),)
    assert "1 nonterminal Run" in str(refused.value)
    # Nothing of the refused migration was applied.
    assert scalar(pg_fresh_dsn, "SELECT max(version) FROM schema_version") == outbox.version - 1
    assert scalar(pg_fresh_dsn, "SELECT to_regclass('run_delivery') IS NULL") is True

    with psycopg.connect(pg_fresh_dsn, autocommit=True) as conn:
        conn.execute("UPDATE run SET status = 'FAILED'")
    report = await migrate(pg_fresh_dsn)
    assert report.after == latest_version()


async def test_outbox_change_holds_the_run_lock_through_its_ddl(pg_fresh_dsn: str) -> None:
    await migrate(pg_fresh_dsn)
    slow = Migration(
        version=latest_version() + 1,
        name="slow_outbox_change",
        sql="SELECT pg_sleep(2); CREATE TABLE outbox_probe (x integer);",
        requires=frozenset({NO_NONTERMINAL_RUNS}),
    )
    blocked: list[type[BaseException]] = []

    def try_to_write_a_live_run() -> None:
        with psycopg.connect(pg_fresh_dsn, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '200ms'")
            try:
                conn.execute("SELECT count(*) FROM run")
            except psycopg.errors.LockNotAvailable as exc:
                blocked.append(type(exc))

    async def writer() -> None:
        # Wait until the migration holds its lock, then try to touch run mid-DDL.
        while not scalar(
            pg_fresh_dsn,
            "SELECT count(*) > 0 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE c.relname = 'run' AND l.mode = 'AccessExclusiveLock' AND l.granted",
        ):
            await anyio.sleep(0.02)
        await anyio.to_thread.run_sync(try_to_write_a_live_run)

    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(migrate, pg_fresh_dsn, migrations=(*shipped(), slow)))
        tg.start_soon(writer)
    assert blocked == [psycopg.errors.LockNotAvailable]  # even a read waited for the DDL
    assert scalar(pg_fresh_dsn, "SELECT max(version) FROM schema_version") == slow.version
    insert_run(pg_fresh_dsn, 1, RunStatus.QUEUED)  # and writers proceed after commit


def test_catalog_rejects_gaps_bad_names_and_unknown_requirements() -> None:
    with pytest.raises(InvalidMigrations, match="expected 0002"):
        build({"0001_a.sql": "", "0003_c.sql": ""})
    with pytest.raises(InvalidMigrations, match="NNNN_name"):
        build({"1_a.sql": ""})
    with pytest.raises(InvalidMigrations, match="unknown conditions"):
        build({"0001_a.sql": "-- requires: the-moon\nSELECT 1;"})
    built = build({"0001_a.sql": "-- x\n-- requires: no-nonterminal-runs\nSELECT 1;"})
    assert built[0].requires == {NO_NONTERMINAL_RUNS}


def test_only_the_outbox_migration_declares_the_live_run_refusal() -> None:
    declared = [m.name for m in shipped() if NO_NONTERMINAL_RUNS in m.requires]
    assert declared == ["delivery_outbox"]
