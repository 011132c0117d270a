"""Boot time of the PostgreSQL profile with a long terminal history vs an empty database.

Usage:  python benchmarks/startup_scale.py [--dsn DSN] [--runs 100000] [--rounds 3]

Issue 15, item 2 (startup in O(work still open)): startup reconciliation
(seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery")
must read only open work and recorded debts, never every terminal Run ever
stored. The target is a boot within 2x of an empty database's with 100,000
terminal Runs.

One run creates two fresh databases (`startup_scale_empty_<pid>`,
`startup_scale_history_<pid>`), migrates both, and fills the second with
`--runs` terminal Runs in one bulk INSERT: a DONE / FAILED / CANCELLED mix,
each with its settled delivery and two Step rows (run.claimed and its
terminal Step), i.e. settled history whose debts are paid. Then, `--rounds`
times and alternating so drift affects both alike, it boots the Vessel on
each database exactly as `vessel serve --dsn` does (`postgres_lifespan`:
ledger and SAQ pools, strict reconciliation, workers and relays started)
and times from entering the profile until the lifespan is "ready". A first,
untimed boot of each warms caches and SAQ's own schema.

The last line is `RESULT {json}` with the median boot seconds of each and
`ratio` (history / empty). Runs on demand only (not part of the test suite).
DSN default: HARNESS_PG_DSN, else the local server.
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
from pathlib import Path

import psycopg
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.adapters.postgres import migrate
from runtime.app.factories import postgres_lifespan

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"

INTENT = json.dumps({"pattern": "echo", "prompt": "hello", "scopes": ["read", "write"],
                     "content": {}})

FILL = ["""
INSERT INTO run (id, pattern, pattern_version, queue, priority, status, seq, fingerprint,
                 intent, created_at, updated_at, started_at, result, error,
                 terminal_step, late_fence_owed)
SELECT md5('startup-scale' || n)::uuid, 'echo', 1, 'runs', 50,
       (ARRAY['DONE', 'FAILED', 'CANCELLED'])[1 + n %% 3], 0, 'fp',
       %(intent)s::jsonb,
       timestamptz '2026-01-01' + n * interval '1 second',
       timestamptz '2026-01-01' + n * interval '1 second' + interval '2 seconds',
       timestamptz '2026-01-01' + n * interval '1 second' + interval '1 second',
       CASE WHEN n %% 3 = 0 THEN '{"text": "hello"}'::jsonb END,
       CASE WHEN n %% 3 = 1 THEN 'boom' END,
       true, false
FROM generate_series(1, %(runs)s) AS n
""", """
INSERT INTO run_delivery (run_id, seq, state, mode, queue, priority, claimed_boot,
                          claim_token, created_at, updated_at)
SELECT id, 0, CASE WHEN status = 'CANCELLED' THEN 'FAILED' ELSE 'SETTLED' END, 'fresh',
       'runs', 50, 'boot-old', 'tok', created_at, updated_at
FROM run
""", """
INSERT INTO run_step (run_id, idx, seq, kind, data, created_at)
SELECT id, 0, 0, 'run.claimed', '{}'::jsonb, started_at FROM run
UNION ALL
SELECT id, 1, 0, CASE status WHEN 'DONE' THEN 'run.done' WHEN 'FAILED' THEN 'run.failed'
                             ELSE 'run.cancelled' END, '{}'::jsonb, updated_at FROM run
"""]


def with_dbname(dsn: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=dbname)


async def create_db(admin_dsn: str, dbname: str) -> str:
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                           .format(sql.Identifier(dbname)))
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    dsn = with_dbname(admin_dsn, dbname)
    await migrate(dsn)
    return dsn


async def drop_db(admin_dsn: str, dbname: str) -> None:
    async with await psycopg.AsyncConnection.connect(admin_dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                           .format(sql.Identifier(dbname)))


async def fill(dsn: str, runs: int) -> float:
    started = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        await conn.execute(FILL[0], {"intent": INTENT, "runs": runs})
        for statement in FILL[1:]:
            await conn.execute(statement)
        await conn.commit()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


async def boot(dsn: str) -> float:
    """Seconds from entering the profile until the lifespan is ready."""
    started = time.perf_counter()
    async with postgres_lifespan(dsn)() as lifespan, lifespan.serving() as status:
        ready = time.perf_counter() - started
        assert status.phase == "ready", status.phase
        assert not status.degraded, status.degraded
    return ready


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("HARNESS_PG_DSN", DEFAULT_DSN))
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    names = {kind: f"startup_scale_{kind}_{os.getpid()}" for kind in ("empty", "history")}
    try:
        dsns = {kind: await create_db(args.dsn, name) for kind, name in names.items()}
        filled = await fill(dsns["history"], args.runs)
        print(f"filled {args.runs} terminal Runs in {filled:.1f} s", flush=True)
        for kind in names:
            await boot(dsns[kind])  # warm-up: caches, SAQ's schema
        times: dict[str, list[float]] = {kind: [] for kind in names}
        for round_ in range(args.rounds):
            for kind in names:
                seconds = await boot(dsns[kind])
                times[kind].append(seconds)
                print(f"round {round_ + 1}: {kind:7} boot {seconds:.3f} s", flush=True)
    finally:
        for name in names.values():
            await drop_db(args.dsn, name)
    empty, history = (statistics.median(times[k]) for k in ("empty", "history"))
    result = {"runs": args.runs, "rounds": args.rounds, "empty_boot_s": round(empty, 3),
              "history_boot_s": round(history, 3), "ratio": round(history / empty, 2),
              "target_ratio": 2.0}
    print(f"boot with {args.runs} terminal Runs: {history:.3f} s; empty database: "
          f"{empty:.3f} s; ratio {history / empty:.2f} (target <= 2.0)")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
