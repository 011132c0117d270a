"""Cost per unit of work of raw SAQ against durable Runs, side by side on one PostgreSQL.

Usage:  python benchmarks/pg_throughput.py [--dsn DSN] [--n 5000] [--concurrency 20]
                                          [--repeats 3] [--producers N]
                                          [--kinds saq,echo,two_step,consent_gate]
                                          [--count-writes]

One invocation creates a fresh database of its own and then runs every kind
once per repeat, interleaved (saq, echo, two_step, consent_gate, saq, ...),
so drift in this shared machine affects all kinds alike. Before each phase
every table is truncated, so each phase starts from the same empty state.

- saq: `--n` no-op `perform_run` jobs published through SaqBroker (the
  settings hops use: retries=0, timeout=0, heartbeat=120, ttl=0) by
  `--producers` concurrent publishers, consumed by the in-process SAQ worker
  of `runs` at `--concurrency` (and `rites` at 1, idle);
- saq_stock: the same, with SAQ 0.26.4's own enqueue, dequeue and job update
  in place of the facade's (`VesselQueue` sends each NOTIFY inside the write it announces
  and writes a dequeued job without a savepoint; SAQ spends a transaction id
  on each of those): raw SAQ as shipped, for the ratios `*_stock`;
- echo / two_step: `--n` Runs submitted through RunEngine.submit (admit,
  publish, mark published) by as many producers, consumed by the same lanes
  at the same concurrency (claim, nodes, fenced settlement, Step evidence);
- consent_gate: as above, and every consent is approved the moment its Run
  has parked (the benchmark wraps `park_consent`), so each Run makes two
  hops and one verdict.

A phase is timed from the first publish/submit until every SAQ job is
complete (and every Run DONE). Per unit of work it reports

- per_s: units per second;
- txids: transaction ids handed out (`pg_snapshot_xmax` delta), i.e. write
  transactions, cluster-wide;
- commits: `pg_stat_database.xact_commit` of the benchmark database (read-only
  transactions included) minus the benchmark's own polls;
- wal_bytes, fsyncs: `pg_stat_wal.wal_bytes` and `wal_sync` deltas, cluster-wide;
- client_ms: CPU of this process (SAQ, engine and producers; `time.process_time`);
- pg_ms: CPU of the PostgreSQL backends serving the benchmark database plus
  the WAL writer (utime + stime from /proc, sampled while the pools are open);
  0 when the server is not local;
- adm_p50_ms / adm_p99_ms: latency of one publish (saq) or submit (Runs).

`other_commits` counts commits in other databases meanwhile: a noise
indicator for the cluster-wide figures. The summary gives medians over the
repeats, each kind's ratios to raw SAQ, and the M14 targets for `echo`
(issue 17); the last line is `RESULT {json}`. `--count-writes` adds, per
phase, the ledger's transactions and write transactions per unit by method
(`write_counter.py`; it costs a statement per transaction, so use it for the
breakdown, not for the figures). Runs on demand only (not part
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
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import psycopg
from psycopg import sql
from saq.queue.postgres import PostgresQueue

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from write_counter import counting  # beside this script, on sys.path when it runs

from runtime.adapters.postgres import PostgresLedger, migrate
from runtime.adapters.saq import SaqBroker, SaqSettings, VesselQueue
from runtime.app.profiles import build_vessel, make_deps
from runtime.keys import hop_key
from runtime.models import Intent, Run
from runtime.seams import Ledger
from runtime.stasis.consent import decide

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
KINDS = ("saq", "saq_stock", "echo", "two_step", "consent_gate")
POLL_S = 0.1
FLUSH_WAIT_S = 1.0
SAQ = SaqSettings(pool_min=4, pool_max=20)
SIGIL = "bench"
KEEP_TABLES = ("schema_version", "saq_versions")
METRICS = ("per_s", "txids", "commits", "wal_bytes", "fsyncs", "client_ms", "pg_ms",
           "adm_p50_ms", "adm_p99_ms")


@dataclass
class Counters:
    xmax: int
    commits: int
    other_commits: int
    wal_bytes: int
    wal_sync: int


@dataclass
class Phase:
    kind: str
    repeat: int
    units: int
    seconds: float
    per_s: float
    txids: float
    commits: float
    wal_bytes: float
    fsyncs: float
    client_ms: float
    pg_ms: float
    adm_p50_ms: float
    adm_p99_ms: float
    other_commits: int
    ledger_writes: dict[str, dict[str, float]] | None = None
    """With --count-writes: per ledger method, transactions and write transactions per unit."""


@dataclass
class Work:
    """What a phase function hands back: its timing, its polls, its latencies."""

    seconds: float
    polls: int
    latencies: list[float]
    pg_cpu_end: dict[int, float]


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
            " (SELECT wal_bytes FROM pg_stat_wal)::bigint, (SELECT wal_sync FROM pg_stat_wal)",
            (dbname, dbname),
        )
        row = await cur.fetchone()
    assert row is not None
    return Counters(*(int(v) for v in row))


# -- PostgreSQL CPU from /proc -------------------------------------------------

TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def pg_cpu(dbname: str) -> dict[int, float]:
    """CPU ms so far of each backend of `dbname` and of the WAL writer (local server only)."""
    found: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                title = fh.read().decode(errors="replace")
            if not title.startswith("postgres:"):
                continue
            if f" {dbname} " not in title and "walwriter" not in title:
                continue
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile, or not ours to read
        found[int(entry)] = (int(fields[11]) + int(fields[12])) * TICK_MS
    return found


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU of the processes alive at the end, since the start (or since they started)."""
    return sum(ms - before.get(pid, 0.0) for pid, ms in after.items())


# -- phases ----------------------------------------------------------------------


async def clear(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            " AND tablename <> ALL(%s)", (list(KEEP_TABLES),)
        )
        tables = [r[0] for r in await cur.fetchall()]
        await conn.execute(
            sql.SQL("TRUNCATE {} CASCADE").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in tables)
            )
        )
        await conn.execute("CHECKPOINT")  # no full-page-write burst lands in one kind only
    await asyncio.sleep(FLUSH_WAIT_S)


async def produce(
    units: int, producers: int, one: Callable[[int], Awaitable[object]]
) -> list[float]:
    """Call `one(i)` for every unit from `producers` lanes; returns each call's seconds."""
    latencies: list[float] = []

    async def lane(start: int) -> None:
        for i in range(start, units, producers):
            began = time.perf_counter()
            await one(i)
            latencies.append(time.perf_counter() - began)

    async with asyncio.TaskGroup() as tg:
        for p in range(producers):
            tg.create_task(lane(p))
    return latencies


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


class StockQueue(VesselQueue):
    """The facade with SAQ's own enqueue (upsert, then NOTIFY), dequeue (job
    updates in savepoints, then NOTIFY) and job update (BEGIN, UPDATE, COMMIT,
    as each finish sends it): what SAQ as shipped writes per job."""

    _enqueue = PostgresQueue._enqueue
    _dequeue = PostgresQueue._dequeue
    _update = PostgresQueue._update


class StockBroker(SaqBroker):
    def _build_queue(self, name: str) -> VesselQueue:
        queue = super()._build_queue(name)
        queue.__class__ = StockQueue
        return queue


async def saq_phase(dsn: str, dbname: str, args: argparse.Namespace, *, stock: bool = False
                    ) -> Work:
    broker = (StockBroker if stock else SaqBroker)(dsn, settings=SAQ)
    await broker.connect()

    async def noop(run_id: UUID, seq: int) -> None:
        return None

    async def publish(i: int) -> None:
        rid = uuid.uuid4()
        await broker.publish("runs", hop_key(rid, 0), run_id=rid, seq=0, priority=50,
                             heartbeat=120)

    workers = [
        asyncio.create_task(broker.serve("runs", noop, args.concurrency)),
        asyncio.create_task(broker.serve("rites", noop, 1)),
    ]
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as poller:
        started = time.perf_counter()
        latencies = await produce(args.n, args.producers, publish)
        polls = await wait_until(poller, COMPLETE, args.n)
        seconds = time.perf_counter() - started
        pg_end = pg_cpu(dbname)
    await stop(workers)
    await broker.disconnect()
    return Work(seconds, polls + 1, latencies, pg_end)  # + the poller's connection check


def approve_on_park(ledger: PostgresLedger, verdicts: set[asyncio.Task[Any]],
                    engine: Any) -> None:
    """Wrap `park_consent` so each parked consent is approved at once, in its own task."""
    park = ledger.park_consent

    async def park_then_approve(
        run_id: UUID, seq: int, consent_id: UUID, now: Any
    ) -> Run | None:
        parked = await park(run_id, seq, consent_id, now)
        if parked is not None:
            task = asyncio.create_task(decide(engine, consent_id, True, SIGIL))
            verdicts.add(task)
            task.add_done_callback(verdicts.discard)
        return parked

    ledger.park_consent = park_then_approve  # type: ignore[method-assign]


async def runs_phase(dsn: str, dbname: str, args: argparse.Namespace, pattern: str) -> Work:
    ledger = await PostgresLedger.connect(dsn, max_size=args.concurrency + args.producers + 4)
    broker = SaqBroker(dsn, settings=SAQ)
    await broker.connect()
    deps = make_deps(cast(Ledger, ledger), broker)  # see runtime.app.profiles on the cast
    vessel = build_vessel(deps, concurrency={"runs": args.concurrency, "rites": 1})
    verdicts: set[asyncio.Task[Any]] = set()
    if pattern == "consent_gate":
        approve_on_park(ledger, verdicts, vessel.engine)

    async def submit(i: int) -> None:
        await vessel.engine.submit(Intent(pattern=pattern, prompt=f"bench {i}", sigil=SIGIL))

    lanes = [asyncio.create_task(vessel.lanes.serve())]
    hops = 2 if pattern == "consent_gate" else 1
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as poller:
        started = time.perf_counter()
        latencies = await produce(args.n, args.producers, submit)
        polls = await wait_until(poller, DONE, args.n)
        polls += await wait_until(poller, COMPLETE, args.n * hops)
        seconds = time.perf_counter() - started
        pg_end = pg_cpu(dbname)
    await stop(lanes)
    for task in list(verdicts):
        await task
    await broker.disconnect()
    await ledger.close()
    return Work(seconds, polls + 1, latencies, pg_end)


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
            raise result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def measure(
    kind: str, repeat: int, dsn: str, admin: str, dbname: str, args: argparse.Namespace
) -> Phase:
    await clear(dsn)
    before = await read_counters(admin, dbname)
    pg_before = pg_cpu(dbname)
    cpu_before = time.process_time()
    with counting() if args.count_writes else nullcontext() as counts:
        if kind in ("saq", "saq_stock"):
            work = await saq_phase(dsn, dbname, args, stock=kind == "saq_stock")
        else:
            work = await runs_phase(dsn, dbname, args, kind)
    client_ms = (time.process_time() - cpu_before) * 1000
    await asyncio.sleep(FLUSH_WAIT_S)  # closed backends have flushed their statistics
    after = await read_counters(admin, dbname)
    n = args.n
    return Phase(
        kind=kind,
        repeat=repeat,
        units=n,
        seconds=round(work.seconds, 3),
        per_s=round(n / work.seconds, 1),
        txids=round((after.xmax - before.xmax) / n, 3),
        commits=round((after.commits - before.commits - work.polls) / n, 3),
        wal_bytes=round((after.wal_bytes - before.wal_bytes) / n, 1),
        fsyncs=round((after.wal_sync - before.wal_sync) / n, 3),
        client_ms=round(client_ms / n, 3),
        pg_ms=round(cpu_spent(pg_before, work.pg_cpu_end) / n, 3),
        adm_p50_ms=round(percentile(work.latencies, 0.50) * 1000, 2),
        adm_p99_ms=round(percentile(work.latencies, 0.99) * 1000, 2),
        other_commits=after.other_commits - before.other_commits,
        ledger_writes=counts.per_unit(n) if counts is not None else None,
    )


# -- summary -------------------------------------------------------------------------


def summarise(phases: list[Phase], kinds: tuple[str, ...], args: argparse.Namespace
              ) -> dict[str, Any]:
    medians: dict[str, dict[str, float]] = {}
    for kind in kinds:
        mine = [p for p in phases if p.kind == kind]
        medians[kind] = {m: round(float(statistics.median(getattr(p, m) for p in mine)), 3)
                         for m in METRICS}
    return {
        "medians": medians,
        "ratios_to_saq": ratios_to(medians, "saq"),
        "ratios_to_saq_stock": ratios_to(medians, "saq_stock"),
        "targets": targets(medians),
        "targets_stock": targets(medians, base="saq_stock"),
        "other_db_commits": sum(p.other_commits for p in phases),
        "repeats": args.repeats,
        "n": args.n,
        "concurrency": args.concurrency,
        "producers": args.producers,
    }


def ratios_to(medians: dict[str, dict[str, float]], base_kind: str
              ) -> dict[str, dict[str, float | None]]:
    """Each kind's medians over `base_kind`'s (empty when that kind did not run)."""
    base = medians.get(base_kind)
    if base is None:
        return {}
    return {kind: {m: (round(row[m] / base[m], 3) if base[m] else None) for m in METRICS}
            for kind, row in medians.items()}


def targets(medians: dict[str, dict[str, float]], base: str = "saq"
            ) -> dict[str, dict[str, Any]]:
    """Issue 17's four targets for `echo` against `base` (the facade's SAQ, or SAQ's own)."""
    if base not in medians or "echo" not in medians:
        return {}
    saq, echo = medians[base], medians["echo"]
    checks = {
        "txids_per_run <= saq + 3": (echo["txids"], saq["txids"] + 3, echo["txids"] <=
                                     saq["txids"] + 3),
        "wal_per_run <= 3x saq": (echo["wal_bytes"], 3 * saq["wal_bytes"],
                                  echo["wal_bytes"] <= 3 * saq["wal_bytes"]),
        "runs_per_s >= 0.5x saq": (echo["per_s"], 0.5 * saq["per_s"],
                                   echo["per_s"] >= 0.5 * saq["per_s"]),
        "client_cpu_per_run <= 2.5x saq": (echo["client_ms"], 2.5 * saq["client_ms"],
                                           echo["client_ms"] <= 2.5 * saq["client_ms"]),
    }
    return {name: {"value": v, "limit": round(limit, 3), "met": met}
            for name, (v, limit, met) in checks.items()}


def table(result: dict[str, Any], kinds: tuple[str, ...]) -> str:
    lines = [f"{'kind':<13}" + "".join(f"{m:>12}" for m in METRICS)]
    for kind in kinds:
        row = result["medians"][kind]
        lines.append(f"{kind:<13}" + "".join(f"{row[m]:>12g}" for m in METRICS))
    for base in ("saq", "saq_stock"):
        for kind in kinds:
            if kind.startswith("saq") or kind not in result[f"ratios_to_{base}"]:
                continue
            row = result[f"ratios_to_{base}"][kind]
            cells = "".join(f"{'-' if row[m] is None else f'{row[m]:g}x':>12}" for m in METRICS)
            lines.append(f"{kind + ' / ' + base:<13}" + cells)
    for key, base in (("targets", "saq"), ("targets_stock", "saq_stock")):
        for name, check in result[key].items():
            verdict = "met" if check["met"] else "MISSED"
            lines.append(f"target ({base}) {name}: {check['value']:g} vs "
                         f"{check['limit']:g} {verdict}")
    return "\n".join(lines)


async def main(args: argparse.Namespace, kinds: tuple[str, ...]) -> dict[str, Any]:
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
        for repeat in range(1, args.repeats + 1):
            for kind in kinds:
                phase = await measure(kind, repeat, dsn, admin, dbname, args)
                phases.append(phase)
                print(json.dumps(asdict(phase)), flush=True)
    finally:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
            )
    return summarise(phases, kinds, args)


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, tuple[str, ...]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("HARNESS_PG_DSN", DEFAULT_DSN))
    parser.add_argument("--n", type=int, default=1000, help="jobs or Runs per phase")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--producers", type=int, default=None,
                        help="concurrent publishers/submitters (default: --concurrency)")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--count-writes", action="store_true",
                        help="break each phase's ledger transactions down by method")
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        parser.error(f"--kinds must name some of {', '.join(KINDS)}; unknown: {unknown}")
    if args.n < 1 or args.repeats < 1 or args.concurrency < 1:
        parser.error("--n, --repeats and --concurrency must be positive")
    if args.producers is None:
        args.producers = args.concurrency
    if args.producers < 1:
        parser.error("--producers must be positive")
    return args, kinds


if __name__ == "__main__":
    arguments, chosen = parse()
    # Per-hop warnings (SAQ's shutdown notice, adapters still catching up with the
    # core) would drown the figures; errors still show.
    logging.basicConfig(level=logging.ERROR)
    outcome = asyncio.run(main(arguments, chosen))
    print(table(outcome, chosen))
    print("RESULT " + json.dumps(outcome, sort_keys=True))
