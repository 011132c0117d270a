"""Two `vessel serve` on one database under load; one is SIGKILLed (issue 15, M11).

The acceptance test of several Vessels on one PostgreSQL: both Vessels serve
the same queue, each holding chatty hops (about 5 s each) when one of them
is killed and never restarted. Then:

- no Run the live Vessel held is failed: its boot's lease stays renewed, so
  the other Vessel's startup and relays leave its hops alone;
- the dead Vessel's work is recovered by the other one (nobody else is left):
  once its lease lapsed, every Run it held ends terminal, as lost;
- the survivor keeps serving new work meanwhile, and every Run ends with at
  most one terminal Step, its evidence written.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg
import pytest

from harness.receipts.process import AUTH, VesselProcess
from tests.restart.probes import wait_for

pytestmark = pytest.mark.restart

CHATTY = {"pattern": "chatty", "content": {"tokens": 100}}  # about 5 s RUNNING per hop
LOAD = 16
"""Four hops at a time per Vessel (runs lane concurrency): both hold some, more queue."""
TERMINAL = ("DONE", "FAILED", "CANCELLED")


def _held(dsn: str, boot_id: str) -> set[str]:
    """Runs RUNNING under a claim of `boot_id` now."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT r.id::text FROM run r JOIN run_delivery d"
            " ON d.run_id = r.id AND d.seq = r.seq"
            " WHERE r.status = 'RUNNING' AND d.claimed_boot = %s", (boot_id,)).fetchall()
    return {str(r[0]) for r in rows}


def _outcome(dsn: str) -> tuple[dict[str, tuple[str, str | None, str | None]], dict[str, int]]:
    """Each Run's (status, error, boot of its latest claim); terminal Steps per Run."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        runs = conn.execute(
            "SELECT r.id::text, r.status, r.error,"
            " (SELECT d.claimed_boot FROM run_delivery d WHERE d.run_id = r.id"
            "   AND d.claimed_boot IS NOT NULL ORDER BY d.seq DESC LIMIT 1)"
            " FROM run r").fetchall()
        steps = conn.execute(
            "SELECT run_id::text, count(*) FROM run_step"
            " WHERE kind IN ('run.done', 'run.failed', 'run.cancelled') GROUP BY run_id"
        ).fetchall()
    return ({str(r[0]): (str(r[1]), r[2], r[3]) for r in runs},
            {str(s[0]): int(s[1]) for s in steps})


def _submit(client: httpx.Client, url: str, key: str, body: dict[str, object]) -> str:
    response = client.post(f"{url}/runs", json={"prompt": key, **body},
                           headers={**AUTH, "Idempotency-Key": key})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_a_vessel_killed_beside_a_live_one_is_recovered_by_it_and_fails_none_of_its_runs(
    pg_fresh_dsn: str, tmp_path: Path, processes: list[VesselProcess]
) -> None:
    dsn = pg_fresh_dsn
    with httpx.Client(timeout=10) as client:
        live = VesselProcess(dsn, tmp_path, "vessel1", migrate=True)
        processes.append(live.start())
        live.wait_ready(client)
        victim = VesselProcess(dsn, tmp_path, "vessel2")
        processes.append(victim.start())
        victim.wait_ready(client)
        live_boot, dead_boot = live.boot_id, victim.boot_id
        assert live_boot and dead_boot and live_boot != dead_boot

        urls = (live.url, victim.url)
        ids = [_submit(client, urls[i % 2], f"two-vessels-{i}", CHATTY) for i in range(LOAD)]
        wait_for(lambda: _held(dsn, live_boot) and _held(dsn, dead_boot),
                 "both Vessels hold hops", within=60)
        held_by_victim = _held(dsn, dead_boot)
        victim.kill()  # SIGKILL, and no replacement: only the live Vessel is left

        # The survivor keeps serving while the dead boot's lease runs out.
        ids += [_submit(client, live.url, f"two-vessels-after-{i}", {"pattern": "echo"})
                for i in range(4)]

        def settled() -> bool:
            runs, steps = _outcome(dsn)
            return all(runs[r][0] in TERMINAL and steps.get(r) for r in ids)

        wait_for(settled, "every Run terminal with its terminal Step", within=90)
        runs, steps = _outcome(dsn)
        assert live.returncode is None, live.output()[-3000:]

    failed_live = {r: v for r, v in runs.items()
                   if v[0] == "FAILED" and v[2] == live_boot}
    assert not failed_live, failed_live  # no Run of the live Vessel was taken from it
    for run_id in held_by_victim:  # the dead Vessel's hops, recovered by the survivor
        status, error, _ = runs[run_id]
        assert status in TERMINAL, (run_id, runs[run_id])
        assert status != "FAILED" or (error or "").startswith("lost"), (run_id, runs[run_id])
    assert any(runs[r][0] == "FAILED" for r in held_by_victim), (held_by_victim, runs)
    other = {r: v for r, v in runs.items() if v[0] == "FAILED"
             and (v[2] != dead_boot or not (v[1] or "").startswith("lost"))}
    assert not other, other  # only the dead Vessel's hops were failed, and as lost
    assert all(n == 1 for n in steps.values()), steps  # one terminal Step per Run
