"""Throughput of raw SAQ against end-to-end echo Runs, on the same PostgreSQL.

Usage:  python benchmarks/pg_throughput.py [--dsn DSN] [--rounds 3] [--jobs 1000]
                                          [--concurrency 20] [--producers 20]

One run creates a fresh database, then alternates two phases `--rounds`
times so drift in the machine affects both alike:

- saq: `--jobs` no-op `perform_run` jobs published through SaqBroker (the
  same settings as hops: retries=0, timeout=0, heartbeat=120, ttl=0) by
  `--producers` concurrent publishers, consumed by the in-process SAQ
  worker of `runs` at `--concurrency` (and `rites` at 1, idle);
- engine: `--jobs` `echo` Runs submitted through RunEngine.submit (admit,
  publish, mark published) by as many producers, consumed by the same lanes
  at the same concurrency (claim, one node, fenced settlement).

Each phase is timed from the first publish/submit until every SAQ job is
complete (and, for the engine, every Run DONE). Per unit of work it reports

- txids: transaction ids consumed (`pg_snapshot_xmax(pg_current_snapshot())`
  delta): write transactions, cluster-wide;
- db_commits: `pg_stat_database.xact_commit` of the benchmark database,
  read-only transactions included, minus the benchmark's own polls;
- wal_syncs: `pg_stat_wal.wal_sync` delta, cluster-wide;
- other_commits: commits in other databases meanwhile (noise indicator for
  the two cluster-wide figures).

Pools are closed before the closing counters are read, so every backend has
flushed its statistics. The last line is `RESULT {json}` with `jobs_per_s`
(raw SAQ), `runs_per_s`, `ratio`, `commits_per_job` (txids per SAQ job) and
the other figures, medians over the rounds. Runs on demand only (not part
of the test suite). DSN default: HARNESS_PG_DSN, else the local server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.adapters.postgres import PostgresLedger, migrate
from runtime.adapters.saq import SaqBroker, SaqSettings
from runtime.app.profiles import build_vessel, make_deps
from runtime.keys import hop_key
from runtime.models import Intent
from runtime.seams import Ledger

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
POLL_S = 0.1
FLUSH_WAIT_S = 1.0
SAQ = SaqSettings(pool_min=4, pool_max=20)


@dataclass
class Counters:
    xmax: int
    db_commits: int
    other_commits: int
    wal_sync: int
    wal_records: int


@dataclass
class Phase:
    kind: str
    round: int
    units: int
    seconds: float
    per_s: float
    txids: float
    db_commits: float
    wal_syncs: float
    wal_records: float
    other_commits: int


def with_dbname(dsn: str, name: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=name)


async def read_counters(admin_dsn: str, dbname: str) -> Counters:
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        cur = await conn.execute(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,"
            " (SELECT xact_commit FROM pg_stat_database WHERE datname = %s),"
            " (SELECT coalesce(sum(xact_commit), 0) FROM pg_stat_database"
            "   WHERE datname IS DISTINCT FROM %s),"
            " (SELECT wal_sync FROM pg_stat_wal), (SELECT wal_records FROM pg_stat_wal)",
            (dbname, dbname),
        )
        row = await cur.fetchone()
    assert row is not None
    return Counters(*(int(v) for v in row))


async def count(dsn: str, query: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(query)
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def clear(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("TRUNCATE saq_jobs, saq_stats, run CASCADE")
    await asyncio.sleep(FLUSH_WAIT_S)


async def produce(units: int, producers: int, one: Callable[[int], Awaitable[object]]) -> None:
    async def lane(start: int) -> None:
        for i in range(start, units, producers):
            await one(i)

    async with asyncio.TaskGroup() as tg:
        for p in range(producers):
            tg.create_task(lane(p))


async def wait_until(conn: psycopg.AsyncConnection[Any], query: str, target: int) -> int:
    """Poll until `query` counts `target`; returns how many polls it took."""
    polls = 0
    while True:
        polls += 1
        cur = await conn.execute(query)
        row = await cur.fetchone()
        if row is not None and int(row[0]) >= target:
            return polls
        await asyncio.sleep(POLL_S)


COMPLETE = "SELECT count(*) FROM saq_jobs WHERE status = 'complete'"
DONE = "SELECT count(*) FROM run WHERE status = 'DONE'"


async def saq_phase(dsn: str, units: int, concurrency: int, producers: int) -> tuple[float, int]:
    broker = SaqBroker(dsn, settings=SAQ)
    await broker.connect()

    async def noop(run_id: UUID, seq: int) -> None:
        return None

    async def publish(i: int) -> None:
        rid = uuid.uuid4()
        await broker.publish("runs", hop_key(rid, 0), run_id=rid, seq=0, priority=50,
                             heartbeat=120)

    workers = [
        asyncio.create_task(broker.serve("runs", noop, concurrency)),
        asyncio.create_task(broker.serve("rites", noop, 1)),
    ]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as poller:
        started = time.perf_counter()
        await produce(units, producers, publish)
        polls = await wait_until(poller, COMPLETE, units)
        seconds = time.perf_counter() - started
    await stop(workers)
    await broker.disconnect()
    return seconds, polls + 1  # + the poller's connection check


async def engine_phase(
    dsn: str, units: int, concurrency: int, producers: int
) -> tuple[float, int]:
    ledger = await PostgresLedger.connect(dsn, max_size=concurrency + producers + 4)
    broker = SaqBroker(dsn, settings=SAQ)
    await broker.connect()
    deps = make_deps(cast(Ledger, ledger), broker)  # see runtime.app.profiles on the cast
    vessel = build_vessel(deps, concurrency={"runs": concurrency, "rites": 1})

    async def submit(i: int) -> None:
        await vessel.engine.submit(Intent(pattern="echo", prompt=f"bench {i}"))

    lanes = [asyncio.create_task(vessel.lanes.serve())]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as poller:
        started = time.perf_counter()
        await produce(units, producers, submit)
        polls = await wait_until(poller, DONE, units)
        polls += await wait_until(poller, COMPLETE, units)
        seconds = time.perf_counter() - started
    await stop(lanes)
    await broker.disconnect()
    await ledger.close()
    return seconds, polls + 1


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result


async def measure(
    kind: str, rnd: int, dsn: str, admin: str, dbname: str, args: argparse.Namespace
) -> Phase:
    await clear(dsn)
    before = await read_counters(admin, dbname)
    run = saq_phase if kind == "saq" else engine_phase
    seconds, polls = await run(dsn, args.jobs, args.concurrency, args.producers)
    await asyncio.sleep(FLUSH_WAIT_S)  # closed backends have flushed their statistics
    after = await read_counters(admin, dbname)
    n = args.jobs
    return Phase(
        kind=kind,
        round=rnd,
        units=n,
        seconds=round(seconds, 3),
        per_s=round(n / seconds, 1),
        txids=round((after.xmax - before.xmax) / n, 3),
        db_commits=round((after.db_commits - before.db_commits - polls) / n, 3),
        wal_syncs=round((after.wal_sync - before.wal_sync) / n, 3),
        wal_records=round((after.wal_records - before.wal_records) / n, 3),
        other_commits=after.other_commits - before.other_commits,
    )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    dbname = f"bench_{uuid.uuid4().hex[:12]}"
    admin = with_dbname(args.dsn, "postgres")
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    dsn = with_dbname(args.dsn, dbname)
    phases: list[Phase] = []
    try:
        await migrate(dsn)
        setup = SaqBroker(dsn, settings=SAQ)
        await setup.connect()  # SAQ's own schema, outside every measurement
        await setup.disconnect()
        for rnd in range(1, args.rounds + 1):
            for kind in ("saq", "engine"):
                phase = await measure(kind, rnd, dsn, admin, dbname, args)
                phases.append(phase)
                print(json.dumps(asdict(phase)), flush=True)
    finally:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
            )

    def median(kind: str, field: str) -> float:
        return float(statistics.median(getattr(p, field) for p in phases if p.kind == kind))

    jobs_per_s = median("saq", "per_s")
    runs_per_s = median("engine", "per_s")
    return {
        "jobs_per_s": jobs_per_s,
        "runs_per_s": runs_per_s,
        "ratio": round(runs_per_s / jobs_per_s, 3),
        "commits_per_job": median("saq", "txids"),
        "commits_per_run": median("engine", "txids"),
        "db_commits_per_job": median("saq", "db_commits"),
        "db_commits_per_run": median("engine", "db_commits"),
        "wal_syncs_per_job": median("saq", "wal_syncs"),
        "wal_syncs_per_run": median("engine", "wal_syncs"),
        "other_db_commits": sum(p.other_commits for p in phases),
        "rounds": args.rounds,
        "units_per_phase": args.jobs,
        "concurrency": args.concurrency,
        "producers": args.producers,
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("HARNESS_PG_DSN", DEFAULT_DSN))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1000, help="jobs or Runs per phase")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--producers", type=int, default=20)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    # Per-hop warnings (SAQ's shutdown notice, adapters still catching up with the
    # core) would drown the figures; errors still show.
    logging.basicConfig(level=logging.ERROR)
    result = asyncio.run(main(arguments))
    print(
        f"raw SAQ {result['jobs_per_s']} jobs/s, engine {result['runs_per_s']} Runs/s, "
        f"ratio {result['ratio']}; write transactions per job {result['commits_per_job']}, "
        f"per Run {result['commits_per_run']}; WAL fsyncs per job "
        f"{result['wal_syncs_per_job']}, per Run {result['wal_syncs_per_run']}"
    )
    print("RESULT " + json.dumps(result, sort_keys=True))
