"""One soak from start to verdict: provision, boot, load, break, settle, tally."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import httpx
import psycopg

from harness.pg import fresh_database, provision
from harness.pg_cluster import restartable_cluster
from harness.receipts.lifecycle import snapshot
from harness.soak.chaos import Chaos, pg_restart_marks
from harness.soak.clients import Approver, Traffic
from harness.soak.fleet import Fleet
from harness.soak.options import SoakOptions
from harness.soak.tally import TERMINAL, Tally, tally
from harness.soak.workload import plans
from sim.checker import check_static

Say = Callable[[str], None]


@contextlib.contextmanager
def _server(options: SoakOptions) -> Iterator[tuple[str, Callable[[str], None] | None]]:
    """The PostgreSQL server, and how to restart it when the soak owns it."""
    if options.pg_restarts:
        with restartable_cluster() as cluster:
            yield cluster.dsn, lambda mode: cluster.restart(mode)
        return
    if options.dsn:
        yield options.dsn, None
        return
    with provision() as server:
        yield server.dsn, None  # a server we did not start is never restarted


@contextlib.contextmanager
def _network(options: SoakOptions, dsn: str) -> Iterator[tuple[str, Callable[[], None]]]:
    """The DSN the Vessels use: through a Toxiproxy proxy carrying the toxics, if any."""
    if not options.toxics:
        yield dsn, lambda: None
        return
    from harness.netfault import netfaults

    with netfaults() as net:
        proxy, proxied = net.proxy_dsn("soak-pg", dsn)
        for i, toxic in enumerate(options.toxics):
            net.add(proxy, toxic.kind, name=f"soak-{i}-{toxic.kind}",
                    **toxic.attributes)  # type: ignore[arg-type]
        yield proxied, net.heal


def run_soak(options: SoakOptions, say: Say = print) -> Tally:
    """Run the soak; write `soak.json` under `options.out_dir`; return the tally."""
    options.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with _server(options) as (server_dsn, restart_pg), \
            fresh_database(server_dsn, prefix="soak") as dsn, \
            _network(options, dsn) as (vessel_dsn, heal):
        fleet = Fleet(vessel_dsn, options.out_dir, options.vessels)
        try:
            result = _soak(options, fleet, dsn, restart_pg, heal, say)
        finally:
            fleet.stop()
        result["boots"] = fleet.describe()
        result["refused_boots"] = fleet.refused
    result["seconds"] = round(time.monotonic() - started, 1)
    (options.out_dir / "soak.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    outcome: Tally = result.pop("_tally")
    return outcome


def _soak(options: SoakOptions, fleet: Fleet, dsn: str,
          restart_pg: Callable[[str], None] | None, heal: Callable[[], None],
          say: Say) -> dict[str, Any]:
    with httpx.Client(timeout=10) as client:
        fleet.start(client)
    say(f"soak: {options.vessels} Vessel(s) ready; admitting {options.runs} Runs")
    traffic = Traffic(fleet, options.seed, deadline_s=options.recover_within_s * 2)
    chaos = Chaos(fleet, options.seed, options.kill_every_s,
                  pg_restart_marks(options.runs, options.pg_restarts), restart_pg,
                  traffic.admitted, options.recover_within_s)
    approver = Approver(fleet, dsn, options.seed)
    chaos_thread = threading.Thread(target=chaos.run, name="soak-chaos", daemon=True)
    approver.start()
    chaos_thread.start()
    work = plans(options.runs, options.seed)
    with ThreadPoolExecutor(options.concurrency, thread_name_prefix="soak-client") as pool:
        list(pool.map(traffic.drive, work, [i % options.concurrency for i in range(len(work))]))
    # The faults go on while admitted work is still in flight, not only while
    # it is being admitted: on a quiet machine admission takes a second.
    in_flight = [a.run_id for a in traffic.admissions.values() if a.run_id]
    _settle(dsn, in_flight, options.settle_within_s)
    chaos.halt.set()
    chaos_thread.join()
    heal()
    say(f"soak: traffic done ({traffic.admitted()} admitted, {len(chaos.faults)} faults); "
        "settling")
    expected = [a.run_id for a in traffic.admissions.values() if a.run_id] + chaos.probes
    settled = _settle(dsn, expected, options.settle_within_s)
    approver.halt.set()
    approver.join(timeout=5)
    snap = snapshot(dsn)
    killed = {f.boot for f in chaos.faults if f.kind == "kill" and f.boot}
    outcome = tally(list(traffic.admissions.values()), chaos.probes, chaos.faults, snap.dump,
                    check_static(snap.dump, snap.jobs), killed)
    return {
        "verdict": "pass" if outcome.passed else "fail",
        "options": {**asdict(options), "toxics": [asdict(t) for t in options.toxics]},
        "counts": outcome.counts, "examples": outcome.examples, "recovery": outcome.recovery,
        "settled_within_s": settled, "faults": [asdict(f) for f in chaos.faults],
        "_tally": outcome,
    }


def _settle(dsn: str, run_ids: list[str], within_s: float) -> float | None:
    """Seconds until every listed Run is terminal; None when some never were."""
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        with contextlib.suppress(psycopg.Error):
            with psycopg.connect(dsn, connect_timeout=3) as conn:
                rows = conn.execute("SELECT id::text, status FROM run").fetchall()
            status: dict[str, str] = {str(r[0]): str(r[1]) for r in rows}
            if all(status.get(r) in TERMINAL for r in run_ids):
                return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    return None
