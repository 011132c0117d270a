"""The named real-process checks of leased delegated jobs (issue 8 item 6, seed 004).

Each check is one scenario on a fresh PostgreSQL database: a `vessel serve
--agents leased --workspace delegates` and one or more `vessel jobs work`
processes (3 s leases renewed every second, or shorter deadlines, so no
check waits 90 s), driven over HTTP and with signals. Every expectation of
the scenario is a `require`: the first that does not hold ends the check
with verdict `failed` and says why. When the scenario ran through,
`Lifecycle.finish` reads every row that matters and adds the budget,
evidence and agreement checks of `harness.receipts.leased` and the
simulator's history-free invariants. The JSON receipt (`<name>.json`, the
process logs in `<name>/`) records the processes, their signals and exit
codes, the notes and `observed` facts, every leased job with its evidence,
attempt events and interpretations, and the verdict `proved` or `failed`.

`harness receipts` runs them beside the restart windows and its index lists
them under "leased jobs (seed 004)"; `tests/restart/test_leased_delegation.py`
runs each one as a test. A check may prove a catalogued crash window
(`LeasedCheck.proves`, the receipt's `proves`): `leased.late_result_fenced_out`
proves `job.inference_returned`, which no single-process Vessel lifecycle
can reach.

Seed 004_85033eb8fc772f12.txt ("Real process tests cover restart, bounded
CLI drain, a hung request, lost acknowledgements and repeated crashes";
"Leases and fences"; "Alpha.2 accounting") and seed 000_81a5c720b14d934a.txt
("Delegated AgentJob labor").
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

from harness.catalogue_check import code_digest
from harness.pg import fresh_database
from harness.receipts.leased import (
    Lifecycle,
    WorkerProcess,
    agent_job_of,
    event_kinds,
    leased_records,
    leased_row,
    lifecycle,
    run_view,
    submit_delegate,
    the_agent_job,
    wait_for,
    wait_run,
)
from harness.receipts.process import AUTH, ReceiptError, VesselProcess
from runtime import faults
from runtime.adapters.leased_agents import WITHDRAWN
from runtime.jobs.rules import EXHAUSTED_CALLS

DONE_WITHIN_S = 30.0
"""The delegate relay passes every 5 s; a job takes well under a second."""
JOB_INFERENCE_RETURNED = faults.JOB_INFERENCE_RETURNED
"""The catalogued crash window `leased.late_result_fenced_out` proves (runtime.faults)."""


class CheckFailed(ReceiptError):
    """An expectation of a leased check did not hold; the receipt's reason says which."""


def require(ok: object, what: str) -> None:
    if not ok:
        raise CheckFailed(what)


def require_eq(found: object, expected: object, what: str) -> None:
    if found != expected:
        raise CheckFailed(f"{what}: expected {expected!r}, found {found!r}")


@dataclass(frozen=True)
class Outcome:
    """What `Lifecycle.finish` checks the Run against: its id and expected status."""

    run_id: str | None
    expect: str | None
    problems: tuple[str, ...] = ()
    """What the check found broken itself, beside what `Lifecycle.finish` checks."""


Body = Callable[[Lifecycle, httpx.Client], Outcome]


@dataclass(frozen=True)
class LeasedCheck:
    name: str
    scenario: str
    body: Body
    proves: str | None = None
    """The catalogued crash window this check proves, when it proves one."""
    kind: str = "leased"
    """The receipt's kind: `leased` (seed 004) or `vessels` (harness.receipts.vessels)."""


# -- driving helpers ----------------------------------------------------------------------


def started_vessel(life: Lifecycle, client: httpx.Client, name: str = "vessel",
                   **options: Any) -> VesselProcess:
    boot = life.vessel(name, migrate=not life.vessels, **options)
    body = boot.wait_ready(client)
    life.note(f"{name} ready", boot_id=body.get("boot_id"))
    return boot


def submitted(client: httpx.Client, boot: VesselProcess, key: str, task: str = "summarise") -> str:
    run_id = submit_delegate(client, boot, key, task=task)
    require(run_id is not None, f"{boot.name} died before answering POST /runs")
    assert run_id is not None
    return run_id


def job_of(life: Lifecycle, run_id: str) -> str:
    return wait_for(lambda: agent_job_of(life.dsn, run_id), 15, f"the AgentJob of {run_id}")


def row(life: Lifecycle, job_id: str) -> dict[str, Any]:
    found = leased_row(life.dsn, job_id)
    require(found is not None, f"leased job {job_id} does not exist")
    assert found is not None
    return found


def wait_job(life: Lifecycle, job_id: str, what: str, test: Callable[[dict[str, Any]], bool],
             within: float = 20.0) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = leased_row(life.dsn, job_id)
        return found if found is not None and test(found) else None

    return wait_for(probe, within, f"leased job {job_id}: {what}")


def calling(fence: int) -> Callable[[dict[str, Any]], bool]:
    """The worker of `fence` reserved its model call and is inside it."""
    return lambda r: ("started", fence) in event_kinds(r) and r["fence"] == fence


def ended(client: httpx.Client, boot: VesselProcess, run_id: str) -> dict[str, Any]:
    return wait_run(client, boot, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)


def require_done(view: dict[str, Any]) -> None:
    require(view["status"] == "DONE",
            f"the Run ended {view['status']}, not DONE ({view.get('error')})")


def stopped(worker: WorkerProcess, within: float = 15.0) -> int:
    """SIGTERM, then the exit code (a CheckFailed if it is still alive `within` s later)."""
    worker.signal(signal.SIGTERM)
    return worker.wait_exit(within)


def require_clean_exit(worker: WorkerProcess) -> None:
    code = stopped(worker)
    require(code == 0, f"{worker.name} exited {code} after SIGTERM, not 0:\n"
                       f"{worker.output()[-2000:]}")


def event_time(dsn: str, job_id: str, *, fence: int, kind: str | None = None,
               first: bool = True) -> datetime | None:
    """When the first (or last) event of `fence` (of `kind`, if given) was written."""
    order = "ASC" if first else "DESC"
    where = "job_id = %s AND fence = %s" + (" AND kind = %s" if kind else "")
    params: tuple[Any, ...] = (job_id, fence, kind) if kind else (job_id, fence)
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        found = conn.execute(
            f"SELECT at FROM leased_job_event WHERE {where} ORDER BY idx {order} LIMIT 1",
            params).fetchone()
    return None if found is None else found[0]


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# -- (a) the job crosses processes ----------------------------------------------------------


def cross_process_delegate(life: Lifecycle, client: httpx.Client) -> Outcome:
    vessel = started_vessel(life, client)
    worker = life.worker("worker-1")
    worker.wait_ready()

    run_id = submitted(client, vessel, "across-1", task="translate")
    view = ended(client, vessel, run_id)
    life.note("Run ended", status=view["status"])
    job_id = job_of(life, run_id)
    job = row(life, job_id)

    require_done(view)
    answer = view["result"]["answer"]
    life.observe(answer=answer, agent_job_id=view["agent_job_id"], job_id=job_id)
    require_eq(answer["assertions"], [{"subject": "task", "value": "translate"}],
               "the delegated answer")
    require(answer["leased_job"] == job_id == view["agent_job_id"],
            f"the answer names leased job {answer['leased_job']}, the Run's AgentJob is "
            f"{view['agent_job_id']}, the leased job {job_id}")
    require(job["state"] == "published" and job["fence"] == 1,
            f"leased job {job['state']} at fence {job['fence']}, not published at fence 1")
    require_eq(event_kinds(job), [("started", 1), ("completed", 1)], "the attempt events")
    require_eq({e["worker"] for e in job["events"]}, {"worker-1"},
               "the workers that ran the job (the other process)")
    require(job["events"][1]["usage"] is not None, "the completed call's usage is missing")

    code = stopped(worker)
    vessel_code = vessel.stop()
    life.observe(worker_exit=code, vessel_exit=vessel_code)
    require_eq(code, 0, "worker-1's exit code after SIGTERM")
    require(vessel_code in (0, -signal.SIGTERM), f"the Vessel exited {vessel_code} on SIGTERM")
    return Outcome(run_id, "DONE")


# -- (b) a worker killed mid-job, another reclaiming after the lease expired ----------------


def worker_killed_reclaimed(life: Lifecycle, client: httpx.Client) -> Outcome:
    vessel = started_vessel(life, client)
    first = life.worker("worker-1", model_script="hang", model_deadline_s=60)
    run_id = submitted(client, vessel, "killed-1")
    job_id = job_of(life, run_id)
    claimed = wait_job(life, job_id, "worker-1 inside its call", calling(1))
    renewed = wait_job(life, job_id, "worker-1 renewed its lease",
                       lambda r: r["lease_renewed_at"] > claimed["lease_renewed_at"])
    life.observe(claimed_lease_expires_at=iso(claimed["lease_expires_at"]),
                 renewed_lease_expires_at=iso(renewed["lease_expires_at"]))
    require(renewed["lease_expires_at"] > claimed["lease_expires_at"],
            "worker-1's renewal did not extend its lease")
    life.note("worker-1 holds a renewed lease", expires=str(renewed["lease_expires_at"]))

    first.kill()  # SIGKILL: no drain, nothing written after this instant
    killed = row(life, job_id)
    require_eq(killed["lease_owner"], "worker-1", "the lease owner right after the SIGKILL")
    require(killed["state"] == "queued" and killed["model_calls_reserved"] == 1,
            f"after the SIGKILL the job is {killed['state']} with "
            f"{killed['model_calls_reserved']} calls reserved, not queued with 1")
    life.note("worker-1 killed", lease_expires_at=str(killed["lease_expires_at"]))

    life.observe(killed_lease_owner=killed["lease_owner"],
                 killed_calls_reserved=killed["model_calls_reserved"])
    return reclaimed_after_kill(life, client, vessel, run_id, job_id, killed)


def reclaimed_after_kill(life: Lifecycle, client: httpx.Client, vessel: VesselProcess,
                         run_id: str, job_id: str, killed: dict[str, Any]) -> Outcome:
    """worker-1 died holding the lease (row `killed`): worker-2 claims only once that lease
    expired and publishes; both calls stay spent, and the dead call has no completed event
    (its usage never came back: unknown, not a zero bill)."""
    second = life.worker("worker-2")
    view = ended(client, vessel, run_id)
    job = row(life, job_id)
    require_done(view)
    require_eq(event_kinds(job), [("started", 1), ("expired_lease", 1), ("started", 2),
                                  ("completed", 2)], "the attempt events")
    reclaimed_at = event_time(life.dsn, job_id, fence=2)
    life.observe(killed_lease_expires_at=iso(killed["lease_expires_at"]),
                 reclaimed_at=iso(reclaimed_at))
    require(reclaimed_at is not None and reclaimed_at >= killed["lease_expires_at"],
            f"fence 2 claimed at {reclaimed_at}, inside worker-1's live lease "
            f"(until {killed['lease_expires_at']})")
    require(job["attempts_used"] == 2 and job["model_calls_reserved"] == 2,
            f"{job['attempts_used']} attempts and {job['model_calls_reserved']} calls, not 2 and 2")
    require_eq([e["worker"] for e in job["events"]],
               ["worker-1", "worker-1", "worker-2", "worker-2"], "the workers of the events")
    require(not any(e["kind"] == "completed" and e["fence"] == 1 for e in job["events"]),
            "the killed call of fence 1 has a completed event")
    require_clean_exit(second)
    return Outcome(run_id, "DONE")


def worker_killed_at_inference_returned(life: Lifecycle, client: httpx.Client) -> Outcome:
    """The catalogued window in a real worker: the model answered, nothing was staged."""
    vessel = started_vessel(life, client)
    first = life.worker("worker-1", crash_point=JOB_INFERENCE_RETURNED)
    run_id = submitted(client, vessel, "inference-1")
    job_id = job_of(life, run_id)
    code = first.wait_exit(30.0)
    require_eq(code, -signal.SIGKILL, "worker-1's exit at the crash plan")
    require(f"crash plan {JOB_INFERENCE_RETURNED}" in first.output(),
            "worker-1 died, but not at job.inference_returned")
    killed = row(life, job_id)
    require(killed["state"] == "queued" and killed["model_calls_reserved"] == 1
            and killed["lease_owner"] == "worker-1",
            f"after the kill the job is {killed['state']}, {killed['model_calls_reserved']} "
            f"calls reserved, lease owner {killed['lease_owner']}: not queued, 1, worker-1")
    life.note("worker-1 killed with the model's answer in hand",
              lease_expires_at=str(killed["lease_expires_at"]))

    life.observe(exit_code=code)
    return reclaimed_after_kill(life, client, vessel, run_id, job_id, killed)


# -- (c) bounded drain on SIGTERM ------------------------------------------------------------


def sigterm_drain_bounded(life: Lifecycle, client: httpx.Client) -> Outcome:
    vessel = started_vessel(life, client)
    first = life.worker("worker-1", model_script="hang", model_deadline_s=60)
    run_id = submitted(client, vessel, "drain-1")
    job_id = job_of(life, run_id)
    wait_job(life, job_id, "worker-1 inside its call", calling(1))

    sent = time.monotonic()
    code = stopped(first, within=20)
    took = time.monotonic() - sent
    life.note("worker-1 exited after SIGTERM", exit_code=code, seconds=round(took, 2))
    life.observe(drain_exit=code, drain_s=round(took, 3))
    require(code == 0, f"worker-1 exited {code} after SIGTERM:\n{first.output()[-2000:]}")
    require(9.0 <= took <= 12.5, f"worker-1 took {took:.2f}s to exit, not the 10 s drain bound")
    require("drain bound reached" in first.output(), "worker-1 never said the bound was reached")
    require("one attempt left to its lease" in first.output(),
            "worker-1 never said it left its attempt to the lease")
    left = row(life, job_id)
    life.observe(left_lease_owner=left["lease_owner"], left_state=left["state"])
    require_eq(left["lease_owner"], "worker-1", "the lease owner after the drain")
    require_eq(left["state"], "queued", "the job after the drain (nothing written: recoverable)")

    second = life.worker("worker-2")
    view = ended(client, vessel, run_id)
    job = row(life, job_id)
    require_done(view)
    require_eq(event_kinds(job), [("started", 1), ("expired_lease", 1), ("started", 2),
                                  ("completed", 2)], "the attempt events")
    require_clean_exit(second)
    return Outcome(run_id, "DONE")


def sigterm_attempt_finishes(life: Lifecycle, client: httpx.Client) -> Outcome:
    vessel = started_vessel(life, client)
    worker = life.worker("worker-1", model_script="slow:2")
    run_id = submitted(client, vessel, "drain-2")
    job_id = job_of(life, run_id)
    wait_job(life, job_id, "worker-1 inside its call", calling(1))

    sent = time.monotonic()
    code = stopped(worker)
    took = time.monotonic() - sent
    life.note("worker-1 exited after SIGTERM", seconds=round(took, 2))
    life.observe(drain_exit=code, drain_s=round(took, 3))
    require(code == 0, f"worker-1 exited {code} after SIGTERM:\n{worker.output()[-2000:]}")
    require(took < 9.0, f"worker-1 took {took:.2f}s to finish a 2 s call")
    require("drain bound reached" not in worker.output(), "worker-1 ran out its drain bound")
    job = row(life, job_id)
    require(job["state"] == "published" and job["lease_owner"] is None,
            f"after the drain the job is {job['state']} leased by {job['lease_owner']}, "
            "not published and released")
    require_eq(event_kinds(job), [("started", 1), ("completed", 1)], "the attempt events")

    view = ended(client, vessel, run_id)
    require_done(view)
    return Outcome(run_id, "DONE")


# -- (d) a hung model request ----------------------------------------------------------------


def hung_model_request(life: Lifecycle, client: httpx.Client) -> Outcome:
    vessel = started_vessel(life, client)
    worker = life.worker("worker-1", model_script="hang", model_deadline_s=1.5)
    run_id = submitted(client, vessel, "hung-1")
    view = ended(client, vessel, run_id)
    job = row(life, job_of(life, run_id))
    require_done(view)

    require_eq(event_kinds(job), [("started", 1), ("failed", 1), ("started", 2),
                                  ("completed", 2)], "the attempt events")
    hung = job["events"][1]
    require("model deadline of 1.5 s" in hung["detail"],
            f"the hung call failed with {hung['detail']!r}, not its deadline")
    require(hung["usage"] is None, "the hung call's usage was never returned: it must be unknown")
    require(job["attempts_used"] == 2 and job["model_calls_reserved"] == 2,
            f"{job['attempts_used']} attempts and {job['model_calls_reserved']} calls, not 2 and 2")
    alive = worker.returncode is None
    life.observe(worker_alive_after_hang=alive)
    require(alive, "the hung call ended the worker process")  # it never hung the worker
    require_clean_exit(worker)
    return Outcome(run_id, "DONE")


# -- (e) lost acknowledgements ---------------------------------------------------------------


def vessel_killed_after_submit(life: Lifecycle, client: httpx.Client) -> Outcome:
    boot1 = life.vessel("vessel-boot1", crash_at="delegate.submitted", migrate=True)
    boot1.wait_ready(client)
    run_id = submit_delegate(client, boot1, "lost-submit-1")
    code = boot1.wait_death()
    life.note("boot 1 died", exit_code=code)
    life.observe(boot1_exit=code, boot1_run_id=run_id)
    require(code == -signal.SIGKILL and "crash plan delegate.submitted" in boot1.output(),
            f"boot 1 ended {code}, not by SIGKILL at delegate.submitted")
    job_id = the_agent_job(life.dsn)
    require(job_id is not None, "boot 1 left no AgentJob")
    assert job_id is not None
    received = row(life, job_id)
    life.observe(received_state=received["state"])
    require_eq(received["state"], "queued", "the leased job boot 1 submitted (the commit landed)")

    boot2 = life.vessel("vessel-boot2", port=boot1.port)
    boot2.wait_ready(client)
    replay = submit_delegate(client, boot2, "lost-submit-1")
    require(replay is not None and (run_id is None or replay == run_id),
            f"the replayed admission answered {replay}, boot 1 had {run_id}")
    assert replay is not None
    worker = life.worker("worker-1")
    view = wait_run(client, boot2, replay, ("DONE", "FAILED"), DONE_WITHIN_S)
    require_done(view)
    job = row(life, job_id)
    require_eq(job["fence"], 1, "the fence (adopted: claimed and run once)")
    require_eq(event_kinds(job), [("started", 1), ("completed", 1)], "the attempt events")
    require_clean_exit(worker)
    return Outcome(replay, "DONE")


def worker_killed_after_stage(life: Lifecycle, client: httpx.Client) -> Outcome:
    vessel = started_vessel(life, client)
    first = life.worker("worker-1", crash_at="stage")
    run_id = submitted(client, vessel, "lost-stage-1")
    code = first.wait_exit(20)
    life.observe(worker1_exit=code)
    require(code == -signal.SIGKILL and "VESSEL_JOBS_CRASH_AT=stage:1" in first.output(),
            f"worker-1 ended {code}, not by SIGKILL right after stage")
    job_id = job_of(life, run_id)
    staged = row(life, job_id)
    life.observe(staged_state=staged["state"])
    require_eq(staged["state"], "published", "the job worker-1 staged before it died")
    life.note("worker-1 died after its stage committed")

    second = life.worker("worker-2")
    view = ended(client, vessel, run_id)
    require_done(view)
    time.sleep(1.0)  # worker-2 polls several times: nothing is left to claim
    job = row(life, job_id)
    require_eq(job["fence"], 1, "the fence (the staged job is never claimed again)")
    require_eq(event_kinds(job), [("started", 1), ("completed", 1)], "the attempt events")
    require_clean_exit(second)
    require("stopped after 0 attempt(s)" in second.output(), "worker-2 made an attempt")
    return Outcome(run_id, "DONE")


def lost_model_reply(life: Lifecycle, client: httpx.Client) -> Outcome:
    vessel = started_vessel(life, client)
    worker = life.worker("worker-1", model_script="lost")
    run_id = submitted(client, vessel, "lost-reply-1")
    view = ended(client, vessel, run_id)
    require_done(view)
    job = row(life, job_of(life, run_id))
    require_eq(event_kinds(job), [("started", 1), ("failed", 1), ("started", 2),
                                  ("completed", 2)], "the attempt events")
    lost = job["events"][1]
    require("ConnectionResetError" in lost["detail"] and lost["usage"] is None,
            f"the lost reply was recorded as {lost['detail']!r} with usage {lost['usage']}")
    require_eq(job["model_calls_reserved"], 2, "the calls reserved (the lost call stays spent)")
    require_clean_exit(worker)
    return Outcome(run_id, "DONE")


# -- (f) repeated crashes --------------------------------------------------------------------


def repeated_crashes(life: Lifecycle, client: httpx.Client) -> Outcome:
    boot1 = started_vessel(life, client, "vessel-boot1")
    run_id = submitted(client, boot1, "crashes-1")
    wait_run(client, boot1, run_id, ("AWAITING_DELEGATE",), DONE_WITHIN_S)
    job_id = job_of(life, run_id)

    first = life.worker("worker-1", crash_at="reserve_model_call")
    code1 = first.wait_exit(20)
    require_eq(code1, -signal.SIGKILL, "worker-1's end (killed with call 1 reserved)")
    life.note("worker-1 died with call 1 reserved")
    boot1.kill()
    life.note("vessel boot 1 killed while the Run waits")
    boot2 = started_vessel(life, client, "vessel-boot2", port=boot1.port)

    second = life.worker("worker-2", crash_at="reserve_model_call")
    code2 = second.wait_exit(20)  # after worker-1's lease expired
    require_eq(code2, -signal.SIGKILL, "worker-2's end (killed with call 2 reserved)")
    life.note("worker-2 died with call 2 reserved")
    spent = row(life, job_id)
    life.observe(worker1_exit=code1, worker2_exit=code2,
                 calls_reserved_after_crashes=spent["model_calls_reserved"])
    require_eq(spent["model_calls_reserved"], 2, "the calls reserved after two crashes")

    third = life.worker("worker-3")
    view = wait_run(client, boot2, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)
    require(view["status"] == "FAILED" and "ended FAILED" in (view.get("error") or ""),
            f"the Run ended {view['status']} ({view.get('error')}), not FAILED by its job")
    job = row(life, job_id)
    require_eq(job["state"], "exhausted", "the leased job after its budget was spent")
    require_eq(event_kinds(job), [("started", 1), ("expired_lease", 1), ("started", 2),
                                  ("expired_lease", 2), ("failed", 2)], "the attempt events")
    require(EXHAUSTED_CALLS in (job["error"] or ""), f"the job's error is {job['error']!r}")
    require(job["attempts_used"] == 2 and job["model_calls_reserved"] == 2,
            f"{job['attempts_used']} attempts and {job['model_calls_reserved']} calls, not 2 and 2")
    require(all(e["usage"] is None for e in job["events"]),
            "a usage was recorded though nothing came back (it must stay unknown)")
    require_clean_exit(third)
    return Outcome(run_id, "FAILED")


# -- cancellation across processes -----------------------------------------------------------


def cancel_waits_for_lease(life: Lifecycle, client: httpx.Client) -> Outcome:
    vessel = started_vessel(life, client)
    worker = life.worker("worker-1", model_script="hang", model_deadline_s=4, retry_base_s=60)
    run_id = submitted(client, vessel, "cancel-1")
    job_id = job_of(life, run_id)
    wait_job(life, job_id, "worker-1 inside its call", calling(1))

    answer = client.post(f"{vessel.url}/runs/{run_id}/cancel", headers=AUTH)
    status = answer.json().get("status") if answer.status_code < 500 else None
    life.note("cancel answered", status=answer.status_code, run=status)
    life.observe(cancel_http_status=answer.status_code, cancel_run_status=status)
    require(answer.status_code == 202 and status == "CANCELLING",
            f"POST /cancel answered {answer.status_code} with the Run {status}, "
            "not 202 CANCELLING")
    held = row(life, job_id)
    life.observe(held_lease_owner=held["lease_owner"])
    require_eq(held["lease_owner"], "worker-1", "the lease owner right after the cancel "
               "(a live lease is never overridden)")

    view = wait_run(client, vessel, run_id, ("CANCELLED",), DONE_WITHIN_S)
    job = row(life, job_id)
    require(job["state"] == "failed" and job["error"] == WITHDRAWN,
            f"the cancelled job is {job['state']} ({job['error']}), not failed as withdrawn")
    released = event_time(life.dsn, job_id, fence=1, kind="failed", first=True)
    withdrawn = event_time(life.dsn, job_id, fence=1, kind="failed", first=False)
    cancelled_at = datetime.fromisoformat(view["updated_at"])
    life.observe(released_at=iso(released), withdrawn_at=iso(withdrawn),
                 cancelled_at=iso(cancelled_at))
    require(released is not None, "worker-1 never closed its attempt")
    require(withdrawn is not None and cancelled_at >= withdrawn,
            f"the Run was CANCELLED at {cancelled_at}, before the job was withdrawn "
            f"({withdrawn})")
    require_eq(event_kinds(job), [("started", 1), ("failed", 1), ("failed", 1)],
               "the attempt events")
    require_clean_exit(worker)
    return Outcome(run_id, "CANCELLED")


# -- a late result from an old fence (job.inference_returned) --------------------------------


LATE_LEASE_S = 4.0
LATE_RENEW_S = 3.5
LATE_CALL_S = 3.0
"""worker-1's call answers after 3 s, before its first renewal is due (3.5 s): stalled
inside the call and let go after fence 2 published, the reply is the first thing it
sees, so it asks to stage a result of fence 1 that the store must refuse."""


def late_result_fenced_out(life: Lifecycle, client: httpx.Client) -> Outcome:
    vessel = started_vessel(life, client)
    first = life.worker("worker-1", model_script=f"slow:{LATE_CALL_S:g}", lease_s=LATE_LEASE_S,
                        renew_every_s=LATE_RENEW_S, model_deadline_s=60)
    run_id = submitted(client, vessel, "late-1")
    job_id = job_of(life, run_id)
    wait_job(life, job_id, "worker-1 inside its call", calling(1))
    first.pause()  # SIGSTOP: stalled mid model call; its lease renewals stop too
    stalled = row(life, job_id)
    life.note("worker-1 stalled (SIGSTOP) inside its model call",
              lease_expires_at=str(stalled["lease_expires_at"]))
    require(stalled["state"] == "queued" and stalled["lease_owner"] == "worker-1"
            and stalled["model_calls_reserved"] == 1 and stalled["fence"] == 1,
            f"worker-1 was not stalled inside its call: the job is {stalled['state']} at fence "
            f"{stalled['fence']}, leased by {stalled['lease_owner']}")

    second = life.worker("worker-2")
    view = ended(client, vessel, run_id)
    require_done(view)
    published = row(life, job_id)
    require_eq(event_kinds(published), [("started", 1), ("expired_lease", 1), ("started", 2),
                                        ("completed", 2)], "the attempt events before the reply")
    reclaimed_at = event_time(life.dsn, job_id, fence=2)
    require(reclaimed_at is not None and reclaimed_at >= stalled["lease_expires_at"],
            f"fence 2 claimed at {reclaimed_at}, inside worker-1's live lease "
            f"(until {stalled['lease_expires_at']})")
    life.note("fence 2 published; worker-1 let go (SIGCONT)")

    first.resume()  # SIGCONT: the old fence's reply comes back late
    late = wait_job(life, job_id, "worker-1's late reply answered",
                    lambda r: len(r["events"]) >= 5)
    require_eq(event_kinds(late), [("started", 1), ("expired_lease", 1), ("started", 2),
                                   ("completed", 2), ("completed", 1)], "the attempt events")
    refused = late["events"][4]
    life.observe(late_event=refused, stalled_lease_expires_at=iso(stalled["lease_expires_at"]),
                 reclaimed_at=iso(reclaimed_at), bundle=late["bundle"])
    require_eq(refused["worker"], "worker-1", "the worker of the late result")
    require_eq(refused["refused"], "stale_fence", "why the late result was refused")
    require(refused["usage"] is not None, "the late result's usage was not kept")
    require(late["state"] == "published" and late["fence"] == 2
            and late["bundle"] == published["bundle"] and late["lease_owner"] is None,
            "the late result of fence 1 changed the job published at fence 2")
    require(late["attempts_used"] == 2 and late["model_calls_reserved"] == 2,
            f"{late['attempts_used']} attempts and {late['model_calls_reserved']} calls, "
            "not 2 and 2 (the stalled call stays consumed)")
    (record,) = [r for r in leased_records(life.dsn) if str(r.job.id) == job_id]
    fences = [i.fence for i in record.interpretations]
    require_eq(fences, [2], "the fences of the job's interpretations (the late one never lands)")
    again = run_view(client, vessel, run_id)
    require(again["status"] == "DONE" and again["result"] == view["result"],
            "the Run changed after the late result")

    require_clean_exit(first)
    require("fence 1 not staged" in first.output(), "worker-1 never said its result was refused")
    require("stopped after 1 attempt(s)" in first.output(),
            "worker-1 did not end its one attempt and stop")
    require_clean_exit(second)
    return Outcome(run_id, "DONE")


# -- the registry ----------------------------------------------------------------------------


LEASED_CHECKS: dict[str, LeasedCheck] = {c.name: c for c in (
    LeasedCheck("leased.cross_process_delegate",
                "vessel serve submits; a separate vessel jobs work claims and executes",
                cross_process_delegate),
    LeasedCheck("leased.worker_killed_reclaimed",
                "worker SIGKILLed inside its model call; another reclaims after lease expiry",
                worker_killed_reclaimed),
    LeasedCheck("leased.worker_killed_at_inference_returned",
                "VESSEL_CRASH_AT=job.inference_returned: SIGKILL with the model's answer "
                "unstaged; another worker reclaims, the spent call stays spent",
                worker_killed_at_inference_returned),
    LeasedCheck("leased.sigterm_drain_bounded",
                "SIGTERM during a hung call: the drain ends at 10 s, the lease is reclaimed",
                sigterm_drain_bounded),
    LeasedCheck("leased.sigterm_attempt_finishes",
                "SIGTERM during a 2 s call: the attempt stages within the drain",
                sigterm_attempt_finishes),
    LeasedCheck("leased.hung_model_request",
                "the first model call never answers; its 1.5 s deadline, then a bounded retry",
                hung_model_request),
    LeasedCheck("leased.vessel_killed_after_submit",
                "vessel serve SIGKILLed at delegate.submitted; boot 2 adopts the job",
                vessel_killed_after_submit),
    LeasedCheck("leased.worker_killed_after_stage",
                "vessel jobs work SIGKILLed right after its stage committed",
                worker_killed_after_stage),
    LeasedCheck("leased.lost_model_reply",
                "the provider's reply is lost in transit once; retried, usage unknown",
                lost_model_reply),
    LeasedCheck("leased.repeated_crashes",
                "two workers die inside their calls and the Vessel dies between them",
                repeated_crashes),
    LeasedCheck("leased.cancel_waits_for_lease",
                "POST /cancel while a worker holds the job's lease",
                cancel_waits_for_lease),
    LeasedCheck("leased.late_result_fenced_out",
                "worker stalled (SIGSTOP) mid call past its lease; fence 2 publishes; "
                "the late reply of fence 1 is refused, its usage kept",
                late_result_fenced_out, proves=JOB_INFERENCE_RETURNED),
)}


def run_check(check: LeasedCheck | str, server_dsn: str, out: Path) -> dict[str, Any]:
    """Run one check on a fresh database of `server_dsn`; write and return its receipt.

    The receipt is `out/<name>.json` (verdict `proved` or `failed`, never an
    exception for a failing check), the process logs are in `out/<name>/`.
    """
    chosen = LEASED_CHECKS[check] if isinstance(check, str) else check
    out.mkdir(parents=True, exist_ok=True)
    receipt: dict[str, Any] = {}
    started = time.time()
    try:
        with fresh_database(server_dsn, prefix="leased") as dsn, lifecycle(
                chosen.name, chosen.scenario, dsn, out / chosen.name, out=out,
                proves=chosen.proves, kind=chosen.kind) as life:
            receipt = life.receipt
            with httpx.Client(timeout=15) as client:
                outcome = chosen.body(life, client)
            life.finish(run_id=outcome.run_id, expect=outcome.expect,
                        problems=list(outcome.problems))
    except Exception as exc:  # the lifecycle wrote its receipt, unless it never began
        if not receipt:
            reason = f"{type(exc).__name__}: {exc}"
            receipt = {"check": chosen.name, "window": chosen.name, "kind": chosen.kind,
                       "scenario": chosen.scenario, "proves": chosen.proves,
                       "code_digest": code_digest(), "verdict": "failed", "reason": reason,
                       "problems": [reason], "started_at": started, "ended_at": time.time(),
                       "seconds": round(time.time() - started, 2), "processes": []}
            (out / f"{chosen.name}.json").write_text(
                json.dumps(receipt, indent=2, sort_keys=True, default=str) + "\n")
    return receipt

