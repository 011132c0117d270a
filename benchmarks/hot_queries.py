"""Admission and claim hot queries, on an empty run table and beside 1,000,000 terminal Runs.

Usage:  python benchmarks/hot_queries.py [--dsn DSN] [--rows 1000000] [--samples 200]
                                         [--backlog N]

Measures, through
PostgresLedger, the latency of each hot-path method (admit_run,
mark_published, claim_delivery, append_steps, settle_run, delete_checkpoint)
over `--samples` fresh Runs, in two databases of its own: one empty, one
holding `--rows` terminal Runs (with their settled delivery and one Step each,
one INSERT ... SELECT generate_series per table, then VACUUM ANALYZE) and,
with `--backlog N`, N QUEUED Runs with PENDING deliveries inserted after the
ANALYZE (stale statistics, as in a burst). The samples alternate between the
two databases in ROUNDS rounds, so load from elsewhere strikes both alike.
It prints EXPLAIN (ANALYZE, BUFFERS) of every hot statement against the
loaded tables (writes inside a transaction that is rolled back) and a table
of p50/p99 latencies with the loaded/empty ratio; issue 17 asks that ratio to
stay within 1.2. The last line is `RESULT {json}`. Runs on demand only. DSN
default: HARNESS_PG_DSN, else the local server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.adapters.postgres import PostgresLedger, migrate
from runtime.adapters.postgres import queries as q
from runtime.adapters.postgres.rows import aware, delivery_params, run_params
from runtime.models import DeliveryState, Intent, ResumeMode, Run, RunDelivery, RunStatus
from runtime.models import Settlement as SettlementModel

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
METHODS = ("admit_run", "mark_published", "claim_delivery", "append_steps", "settle_run",
           "delete_checkpoint")
TARGET_RATIO = 1.2

LOAD_RUNS = """
INSERT INTO run (id, pattern, pattern_version, queue, priority, status, seq, session,
                 fingerprint, intent, created_at, updated_at, started_at, result, error)
SELECT md5('bulk' || g)::uuid, 'echo', 1, 'runs', 50,
       (ARRAY['DONE', 'DONE', 'DONE', 'FAILED', 'CANCELLED'])[1 + g %% 5], 0,
       CASE WHEN g %% 10 = 0 THEN 'sess-' || (g %% 1000) END,
       md5('fp' || g), %(intent)s,
       %(epoch)s::timestamptz - (%(rows)s - g) * interval '1 second',
       %(epoch)s::timestamptz - (%(rows)s - g - 1) * interval '1 second',
       %(epoch)s::timestamptz - (%(rows)s - g) * interval '1 second',
       CASE WHEN g %% 5 < 3 THEN '{"echo": "bulk"}'::jsonb END,
       CASE WHEN g %% 5 = 3 THEN 'bulk failure' END
FROM generate_series(1, %(rows)s) AS g
"""

LOAD_DELIVERIES = """
INSERT INTO run_delivery (run_id, seq, state, mode, queue, priority, claimed_boot, claim_token,
                          created_at, updated_at)
SELECT id, 0, 'SETTLED', 'fresh', 'runs', 50, 'bulk-boot', id::text, created_at, updated_at
FROM run WHERE NOT EXISTS (SELECT 1 FROM run_delivery d WHERE d.run_id = run.id)
"""

LOAD_STEPS = """
INSERT INTO run_step (run_id, idx, seq, kind, data, created_at)
SELECT id, 0, 0, 'run.done', '{"error": null}'::jsonb, updated_at
FROM run WHERE NOT EXISTS (SELECT 1 FROM run_step s WHERE s.run_id = run.id)
"""


BACKLOG_RUNS = """
INSERT INTO run (id, pattern, pattern_version, queue, priority, status, seq, fingerprint,
                 intent, created_at, updated_at)
SELECT md5('backlog' || g)::uuid, 'echo', 1, 'runs', 50, 'QUEUED', 0, md5('bfp' || g),
       %(intent)s, %(epoch)s::timestamptz, %(epoch)s::timestamptz
FROM generate_series(1, %(count)s) AS g
"""

BACKLOG_DELIVERIES = """
INSERT INTO run_delivery (run_id, seq, state, mode, queue, priority, created_at, updated_at)
SELECT md5('backlog' || g)::uuid, 0, 'PENDING', 'fresh', 'runs', 50,
       %(epoch)s::timestamptz, %(epoch)s::timestamptz
FROM generate_series(1, %(count)s) AS g
"""


def with_dbname(dsn: str, name: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=name)


def fresh_run(n: int, at: datetime) -> tuple[Run, RunDelivery]:
    intent = Intent(pattern="echo", prompt=f"hot {n}", scopes=("read",))
    run = Run(
        id=uuid.uuid4(), pattern="echo", pattern_version=1, queue="runs", priority=50,
        status=RunStatus.QUEUED, seq=0, fingerprint=intent.fingerprint(), intent=intent,
        created_at=at, updated_at=at,
    )  # fmt: skip
    delivery = RunDelivery(
        run_id=run.id, seq=0, state=DeliveryState.PENDING, mode=ResumeMode.FRESH,
        queue="runs", priority=50, created_at=at, updated_at=at,
    )  # fmt: skip
    return run, delivery


async def timed(samples: dict[str, list[float]], name: str,
                op: Callable[[], Awaitable[Any]]) -> Any:
    began = time.perf_counter()
    result = await op()
    samples.setdefault(name, []).append(time.perf_counter() - began)
    return result


async def hot_path(ledger: PostgresLedger, count: int, at: datetime) -> dict[str, list[float]]:
    """One echo Run's ledger path, `count` times over, each method timed."""
    samples: dict[str, list[float]] = {}
    for n in range(count):
        await one_run(ledger, samples, n, at)
    return samples


async def one_run(
    ledger: PostgresLedger, samples: dict[str, list[float]], n: int, at: datetime
) -> None:
    run, delivery = fresh_run(n, at)
    done = SettlementModel(status=RunStatus.DONE, result={"echo": "hot"})
    steps = [("run.claimed", {"seq": 0}), ("node.started", {"node": "echo"}),
             ("node.completed", {"node": "echo"})]
    await timed(samples, "admit_run", lambda: ledger.admit_run(run, delivery))
    await timed(samples, "mark_published", lambda: ledger.mark_published(run.id, 0, at))
    await timed(samples, "claim_delivery",
                lambda: ledger.claim_delivery(run.id, 0, "hot-boot", f"t{n}", at))
    await timed(samples, "append_steps", lambda: ledger.append_steps(run.id, 0, steps, at))
    await timed(samples, "settle_run", lambda: ledger.settle_run(run.id, 0, done, at))
    await timed(samples, "delete_checkpoint", lambda: ledger.delete_checkpoint(run.id))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        name: {"p50_ms": round(percentile(v, 0.5) * 1000, 3),
               "p99_ms": round(percentile(v, 0.99) * 1000, 3)}
        for name, v in samples.items()
    }


async def load(dsn: str, rows: int) -> float:
    began = time.perf_counter()
    intent = Jsonb(Intent(pattern="echo", prompt="bulk").model_dump(mode="json"))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(LOAD_RUNS, {"intent": intent, "epoch": EPOCH, "rows": rows})
        await conn.execute(LOAD_DELIVERIES)
        await conn.execute(LOAD_STEPS)
        await conn.execute("VACUUM ANALYZE run, run_delivery, run_step")
    return time.perf_counter() - began


def explained() -> list[tuple[str, sql.Composable, dict[str, Any]]]:
    """Every hot statement with parameters of a Run in the state it meets them."""
    run, delivery = fresh_run(0, EPOCH)
    k = {"run_id": run.id, "seq": 0, "now": aware(EPOCH)}
    terminal = q.TERMINAL_STEP_KINDS
    settle = {"settleable": q.SETTLEABLE, "status": "DONE", "result": Jsonb({}), "error": None}
    return [
        ("admit: CURRENT_PAIR", q.CURRENT_PAIR, {"id": run.id}),
        ("admit: SESSION_BUSY (a bulk session)", q.SESSION_BUSY,
         {"session": "sess-10", "id": run.id, "terminal": q.TERMINAL}),
        ("admit: ADMIT_PAIR", q.ADMIT_PAIR,
         {**run_params(run),
          **{q.DELIVERY_PREFIX + c: v for c, v in delivery_params(delivery).items()}}),
        ("mark_published: PUBLISH_PAIR", q.PUBLISH_PAIR, k),
        ("claim: LOCK_PAIR", q.LOCK_PAIR, {"run_id": run.id, "seq": 0}),
        ("claim: CLAIM_PAIR", q.CLAIM_PAIR,
         {**k, "boot_id": "b", "token": "t", "claimable": q.CLAIMABLE}),
        ("steps: LOCK_STEPS_OF_RUN", q.LOCK_STEPS_OF_RUN,
         {"ns": q.STEP_LOCK_NAMESPACE, "run_id": run.id}),
        ("steps: APPEND_STEPS", q.APPEND_STEPS,
         {**k, "kinds": ["run.claimed"], "datas": [Jsonb({})], "terminal": terminal}),
        ("settle: LOCK_PAIR_AND_STEPS", q.LOCK_PAIR_AND_STEPS,
         {"run_id": run.id, "seq": 0, "ns": q.STEP_LOCK_NAMESPACE}),
        ("settle: SETTLE_STEPS_PAIR (lifecycle + terminal Step)", q.SETTLE_STEPS_PAIR,
         {**k, **settle, "kinds": ["node.done", "run.done"], "datas": [Jsonb({}), Jsonb({})],
          "terminal": terminal}),
        ("settle: SETTLE_PAIR (settled above: matches none)", q.SETTLE_PAIR, {**k, **settle}),
        ("relay: PAGE_RUNS_FIRST (QUEUED)", q.PAGE_RUNS_FIRST,
         {"statuses": ["QUEUED"], "limit": 100}),
    ]


async def explain_all(dsn: str) -> list[tuple[str, str]]:
    """EXPLAIN ANALYZE each statement in turn in one transaction, then roll back."""
    plans: list[tuple[str, str]] = []
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        async with conn.cursor() as cur:
            for name, statement, params in explained():
                await cur.execute(
                    sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {}").format(statement), params
                )
                plans.append((name, "\n".join(r[0] for r in await cur.fetchall())))
        await conn.rollback()
    return plans


async def create(admin: str, dbname: str) -> str:
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    return with_dbname(admin, dbname)


async def drop(admin: str, dbname: str) -> None:
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
        )


async def add_backlog(dsn: str, count: int) -> None:
    """`count` QUEUED Runs with PENDING deliveries, after the ANALYZE: statistics that
    still say no Run is QUEUED, as in a burst on a calm table."""
    intent = Jsonb(Intent(pattern="echo", prompt="backlog").model_dump(mode="json"))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(BACKLOG_RUNS, {"intent": intent, "count": count, "epoch": EPOCH})
        await conn.execute(BACKLOG_DELIVERIES, {"count": count, "epoch": EPOCH})


ROUNDS = 10
"""The samples of each table are taken in this many alternating rounds (empty, loaded,
empty, ...), so drift on a shared machine strikes both alike."""


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:12]
    admin = with_dbname(args.dsn, "postgres")
    names = {"empty": f"hotq_e_{tag}", "loaded": f"hotq_l_{tag}"}
    dsns: dict[str, str] = {}
    try:
        for which, name in names.items():
            dsns[which] = await create(admin, name)
            await migrate(dsns[which])
        load_s = await load(dsns["loaded"], args.rows)
        if args.backlog:
            await add_backlog(dsns["loaded"], args.backlog)
        ledgers = {w: await PostgresLedger.connect(d, max_size=2) for w, d in dsns.items()}
        samples: dict[str, dict[str, list[float]]] = {"empty": {}, "loaded": {}}
        try:
            for ledger in ledgers.values():
                await hot_path(ledger, 20, EPOCH + timedelta(days=1))  # warm: connections
            per_round = max(1, args.samples // ROUNDS)
            for _ in range(ROUNDS):
                for which, ledger in ledgers.items():
                    for name, values in (await hot_path(
                            ledger, per_round, EPOCH + timedelta(days=1))).items():
                        samples[which].setdefault(name, []).extend(values)
        finally:
            for ledger in ledgers.values():
                await ledger.close()
        plans = await explain_all(dsns["loaded"])
    finally:
        for name in names.values():
            await drop(admin, name)
    for name, plan in plans:
        print(f"-- {name}\n{plan}\n")
    empty, loaded = summary(samples["empty"]), summary(samples["loaded"])
    ratios = {m: round(loaded[m]["p50_ms"] / empty[m]["p50_ms"], 3) for m in METHODS}
    return {"rows": args.rows, "backlog": args.backlog, "samples": args.samples,
            "load_s": round(load_s, 1), "empty": empty, "loaded": loaded, "p50_ratio": ratios,
            "within_target": all(r <= TARGET_RATIO for r in ratios.values())}


def table(result: dict[str, Any]) -> str:
    lines = [f"{'method':<18}{'empty p50':>10}{'p99':>9}{'loaded p50':>12}{'p99':>9}{'ratio':>8}"]
    for m in METHODS:
        e, f = result["empty"][m], result["loaded"][m]
        lines.append(f"{m:<18}{e['p50_ms']:>10g}{e['p99_ms']:>9g}{f['p50_ms']:>12g}"
                     f"{f['p99_ms']:>9g}{result['p50_ratio'][m]:>8g}")
    lines.append(f"{result['rows']} terminal Runs (and a backlog of {result['backlog']} QUEUED) "
                 f"loaded in {result['load_s']} s; p50 within "
                 f"{TARGET_RATIO}x of empty: {result['within_target']}")
    return "\n".join(lines)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("HARNESS_PG_DSN", DEFAULT_DSN))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--backlog", type=int, default=0)
    args = parser.parse_args(argv)
    if args.rows < 0 or args.samples < 1 or args.backlog < 0:
        parser.error("--rows and --backlog must not be negative, --samples must be positive")
    return args


if __name__ == "__main__":
    outcome = asyncio.run(main(parse()))
    print(table(outcome))
    print("RESULT " + json.dumps(outcome, sort_keys=True))

