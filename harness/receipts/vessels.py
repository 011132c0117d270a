"""Several Vessels on one database: the two-Vessel receipt (issue 15, M11 item 1).

`two_vessels` starts two `vessel serve` on one fresh database, loads both
with chatty hops (about 5 s each) until each holds some, SIGKILLs one and
never restarts it, and keeps the other serving. What must hold, checked by
`two_vessel_problems` over the rows at the end:

- no Run claimed by the live Vessel is failed: its boot lease stays renewed,
  so the other's startup and relays leave its hops alone;
- every Run the dead Vessel held ends terminal, FAILED only as lost, and at
  least one was taken over that way: the survivor recovers the dead boot's
  work once its lease lapsed (runtime.recovery.boot_lease, 15 s);
- nothing else is failed, every Run ends terminal with exactly one terminal
  Step, and the survivor is still alive.

`harness receipts` proves it as the check `vessels.two_on_one_database` (a
receipt of kind `vessels`, written by the same `Lifecycle` as the leased
checks, so the simulator's history-free invariants run over its rows too);
tests/restart/test_two_vessels.py runs the same check.
"""

from __future__ import annotations

import httpx
import psycopg

from harness.receipts.leased import Lifecycle, wait_for
from harness.receipts.leased_checks import LeasedCheck, Outcome, require
from harness.receipts.process import AUTH, ReceiptError, VesselProcess

KIND = "vessels"
CHATTY: dict[str, object] = {"pattern": "chatty", "content": {"tokens": 100}}
"""About 5 s RUNNING per hop."""
LOAD = 16
"""Four hops at a time per Vessel (runs lane concurrency): both hold some, more queue."""
AFTER = 4
"""Runs submitted to the survivor after the kill: it keeps serving meanwhile."""
TERMINAL = ("DONE", "FAILED", "CANCELLED")
HOLD_WITHIN_S = 60.0
SETTLE_WITHIN_S = 90.0

Runs = dict[str, tuple[str, str | None, str | None]]
"""Run id: (status, error, boot of its latest claim)."""


def held(dsn: str, boot_id: str) -> set[str]:
    """Runs RUNNING under a claim of `boot_id` now."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        rows = conn.execute(
            "SELECT r.id::text FROM run r JOIN run_delivery d"
            " ON d.run_id = r.id AND d.seq = r.seq"
            " WHERE r.status = 'RUNNING' AND d.claimed_boot = %s", (boot_id,)).fetchall()
    return {str(r[0]) for r in rows}


def outcome(dsn: str) -> tuple[Runs, dict[str, int]]:
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


def submit(client: httpx.Client, url: str, key: str, body: dict[str, object]) -> str:
    response = client.post(f"{url}/runs", json={"prompt": key, **body},
                           headers={**AUTH, "Idempotency-Key": key})
    if response.status_code != 201:
        raise ReceiptError(f"POST /runs answered {response.status_code}: {response.text[:300]}")
    return str(response.json()["id"])


def two_vessel_problems(runs: Runs, steps: dict[str, int], ids: list[str], live_boot: str,
                        dead_boot: str, held_by_dead: set[str]) -> list[str]:
    """What the rows at the end break of the module's rules (empty: proved)."""
    problems = [f"Run {r} of the live Vessel was failed: {v}" for r, v in sorted(runs.items())
                if v[0] == "FAILED" and v[2] == live_boot]
    for run_id in sorted(held_by_dead):
        status, error, _ = runs.get(run_id, ("missing", None, None))
        if status not in TERMINAL or (status == "FAILED" and not (error or "").startswith("lost")):
            problems.append(f"Run {run_id} the dead Vessel held ended {status} ({error})")
    if not any(runs.get(r, ("",))[0] == "FAILED" for r in held_by_dead):
        problems.append(f"none of the dead Vessel's {len(held_by_dead)} hops was recovered "
                        "as lost by the survivor")
    problems += [f"Run {r} failed though the dead Vessel did not hold it: {v}"
                 for r, v in sorted(runs.items()) if v[0] == "FAILED"
                 and (v[2] != dead_boot or not (v[1] or "").startswith("lost"))]
    problems += [f"Run {r} ended {runs.get(r, ('missing',))[0]} with {steps.get(r, 0)} "
                 "terminal Steps" for r in ids
                 if runs.get(r, ("missing",))[0] not in TERMINAL or steps.get(r) != 1]
    problems += [f"Run {r} has {n} terminal Steps" for r, n in sorted(steps.items()) if n != 1]
    return problems


def _serve(life: Lifecycle, client: httpx.Client, name: str, migrate: bool) -> VesselProcess:
    boot = VesselProcess(life.dsn, life.workdir, name, migrate=migrate)
    life.vessels.append(boot.start())
    body = boot.wait_ready(client)
    life.note(f"{name} ready", boot_id=body.get("boot_id"), pid=boot.pid)
    return boot


def two_vessels(life: Lifecycle, client: httpx.Client) -> Outcome:
    """The two-Vessel lifecycle (module docstring); its problems go in the receipt."""
    dsn = life.dsn
    live = _serve(life, client, "vessel1", migrate=True)
    dead = _serve(life, client, "vessel2", migrate=False)
    live_boot, dead_boot = live.boot_id, dead.boot_id
    require(live_boot and dead_boot and live_boot != dead_boot,
            f"two distinct boots, got {live_boot} and {dead_boot}")
    assert live_boot is not None and dead_boot is not None
    urls = (live.url, dead.url)
    ids = [submit(client, urls[i % 2], f"two-vessels-{i}", CHATTY) for i in range(LOAD)]
    wait_for(lambda: True if held(dsn, live_boot) and held(dsn, dead_boot) else None,
             HOLD_WITHIN_S, "both Vessels hold hops")
    held_by_dead, held_by_live = held(dsn, dead_boot), held(dsn, live_boot)
    dead.kill()  # SIGKILL, and no replacement: only the live Vessel is left
    life.note("vessel2 SIGKILLed while both held hops", dead_held=sorted(held_by_dead),
              live_held=sorted(held_by_live))
    ids += [submit(client, live.url, f"two-vessels-after-{i}", {"pattern": "echo"})
            for i in range(AFTER)]

    def settled() -> bool | None:
        runs, steps = outcome(dsn)
        return True if all(runs[r][0] in TERMINAL and steps.get(r) for r in ids) else None

    wait_for(settled, SETTLE_WITHIN_S, "every Run terminal with its terminal Step", every=0.5)
    life.note("every Run terminal")
    runs, steps = outcome(dsn)
    problems = two_vessel_problems(runs, steps, ids, live_boot, dead_boot, held_by_dead)
    if live.returncode is not None:
        problems.append(f"the live Vessel exited {live.returncode}")
    life.observe(live_boot=live_boot, dead_boot=dead_boot, runs=len(ids),
                 dead_held=sorted(held_by_dead), live_held=sorted(held_by_live),
                 recovered_as_lost=sorted(r for r in held_by_dead if runs[r][0] == "FAILED"),
                 statuses={s: sum(v[0] == s for v in runs.values()) for s in TERMINAL})
    return Outcome(run_id=None, expect=None, problems=tuple(problems))


VESSEL_CHECKS: dict[str, LeasedCheck] = {c.name: c for c in (
    LeasedCheck("vessels.two_on_one_database",
                "two vessel serve on one database; one SIGKILLed while both hold hops; "
                "the survivor fails none of its own Runs and recovers the dead one's",
                two_vessels, kind=KIND),
)}
