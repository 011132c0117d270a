"""Delegated jobs run by a real second process, and the worker's faults (issue 8 item 6).

Every check here starts real processes on a fresh PostgreSQL database: a
`vessel serve --agents leased --workspace delegates` (the Vessel submits a
`delegate` Run's AgentJob as a leased job) and one or more `vessel jobs
work` processes (short leases: 3 s, renewed every second, so no check
waits 90 s). A check drives them over HTTP and with signals, then
`harness.receipts.leased` reads every row that matters and asserts the
budgets held and no evidence was lost (one leased job and one evidence row
per AgentJob, the request preserved exactly, attempts and reserved calls
within their limits, one `started` event per reserved call, every claim
closed), plus the simulator's history-free invariants. Each check writes a
JSON receipt into its tmp dir.

Seed 004_85033eb8fc772f12.txt ("Real process tests cover restart, bounded
CLI drain, a hung request, lost acknowledgements and repeated crashes") and
seed 000_81a5c720b14d934a.txt ("Delegated AgentJob labor").
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.receipts.leased import (
    Lifecycle,
    agent_job_of,
    event_kinds,
    leased_row,
    lifecycle,
    submit_delegate,
    the_agent_job,
    wait_for,
    wait_run,
)
from harness.receipts.process import AUTH, VesselProcess
from runtime.adapters.leased_agents import WITHDRAWN
from runtime.jobs.rules import EXHAUSTED_CALLS

pytestmark = [pytest.mark.restart, pytest.mark.timeout(180)]

DONE_WITHIN_S = 30.0
"""The delegate relay passes every 5 s; a job takes well under a second."""


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=15) as c:
        yield c


def proved(life: Lifecycle, run_id: str | None, expect: str | None) -> dict[str, Any]:
    receipt = life.finish(run_id=run_id, expect=expect)
    assert receipt["verdict"] == "proved", json.dumps(receipt["problems"], indent=2)
    assert all(inv["held"] for inv in receipt["invariants"])
    return receipt


def job_of(life: Lifecycle, run_id: str) -> str:
    return wait_for(lambda: agent_job_of(life.dsn, run_id), 15, f"the AgentJob of {run_id}")


def wait_job(life: Lifecycle, job_id: str, what: str, test: Any,
             within: float = 20.0) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        row = leased_row(life.dsn, job_id)
        return row if row is not None and test(row) else None

    return wait_for(probe, within, f"leased job {job_id}: {what}")


def calling(fence: int) -> Any:
    """The worker of `fence` reserved its model call and is inside it."""
    return lambda row: ("started", fence) in event_kinds(row) and row["fence"] == fence


def started_vessel(life: Lifecycle, client: httpx.Client, name: str = "vessel",
                   **options: Any) -> VesselProcess:
    boot = life.vessel(name, migrate=not life.vessels, **options)
    body = boot.wait_ready(client)
    life.note(f"{name} ready", boot_id=body.get("boot_id"))
    return boot


# -- (a) the job crosses processes ------------------------------------------------------


def test_a_delegate_run_is_executed_by_a_separate_worker_process(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("delegated_across_processes", "vessel serve + vessel jobs work",
                   pg_fresh_dsn, tmp_path) as life:
        vessel = started_vessel(life, client)
        worker = life.worker("worker-1")
        worker.wait_ready()

        run_id = submit_delegate(client, vessel, "across-1", task="translate")
        assert run_id is not None
        view = wait_run(client, vessel, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)
        life.note("Run ended", status=view["status"])
        job_id = job_of(life, run_id)
        job = leased_row(life.dsn, job_id)
        assert job is not None

        assert view["status"] == "DONE", view
        answer = view["result"]["answer"]
        assert answer["assertions"] == [{"subject": "task", "value": "translate"}]
        assert answer["leased_job"] == job_id == view["agent_job_id"]
        assert job["state"] == "published" and job["fence"] == 1
        assert event_kinds(job) == [("started", 1), ("completed", 1)]
        assert {e["worker"] for e in job["events"]} == {"worker-1"}  # the other process
        assert job["events"][1]["usage"] is not None

        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        assert vessel.stop() in (0, -signal.SIGTERM)
        proved(life, run_id, "DONE")
    assert (tmp_path / "delegated_across_processes.json").exists()


# -- (b) a worker killed mid-job, another reclaiming after the lease expired ------------


def test_a_worker_killed_mid_job_is_reclaimed_by_another_after_lease_expiry(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("worker_killed_mid_job", "SIGKILL inside the model call, reclaim",
                   pg_fresh_dsn, tmp_path) as life:
        vessel = started_vessel(life, client)
        first = life.worker("worker-1", model_script="hang", model_deadline_s=60)
        run_id = submit_delegate(client, vessel, "killed-1")
        assert run_id is not None
        job_id = job_of(life, run_id)
        claimed = wait_job(life, job_id, "worker-1 inside its call", calling(1))
        renewed = wait_job(life, job_id, "worker-1 renewed its lease",
                           lambda r: r["lease_renewed_at"] > claimed["lease_renewed_at"])
        assert renewed["lease_expires_at"] > claimed["lease_expires_at"]
        life.note("worker-1 holds a renewed lease", expires=str(renewed["lease_expires_at"]))

        first.kill()  # SIGKILL: no drain, nothing written after this instant
        killed = leased_row(life.dsn, job_id)
        assert killed is not None and killed["lease_owner"] == "worker-1"
        assert killed["state"] == "queued" and killed["model_calls_reserved"] == 1
        life.note("worker-1 killed", lease_expires_at=str(killed["lease_expires_at"]))

        second = life.worker("worker-2")
        view = wait_run(client, vessel, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)
        job = leased_row(life.dsn, job_id)
        assert job is not None and view["status"] == "DONE", view
        assert event_kinds(job) == [("started", 1), ("expired_lease", 1), ("started", 2),
                                    ("completed", 2)]
        reclaimed_at = _claim_time(life, job_id, fence=2)
        assert reclaimed_at >= killed["lease_expires_at"]  # never inside a live lease
        assert job["attempts_used"] == 2 and job["model_calls_reserved"] == 2
        assert [e["worker"] for e in job["events"]] == ["worker-1", "worker-1", "worker-2",
                                                        "worker-2"]
        # the killed call's usage was never returned: no completed event, not a zero bill
        assert not any(e["kind"] == "completed" and e["fence"] == 1 for e in job["events"])

        second.signal(signal.SIGTERM)
        assert second.wait_exit(15) == 0
        proved(life, run_id, "DONE")


def _claim_time(life: Lifecycle, job_id: str, fence: int) -> datetime:
    import psycopg

    with psycopg.connect(life.dsn) as conn:
        row = conn.execute(
            "SELECT at FROM leased_job_event WHERE job_id = %s AND fence = %s "
            "ORDER BY idx LIMIT 1", (job_id, fence)).fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


# -- (c) bounded drain on SIGTERM --------------------------------------------------------


def test_sigterm_drains_for_at_most_ten_seconds_and_the_lease_stays_recoverable(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("bounded_drain", "SIGTERM during a hung call: drain bound, then reclaim",
                   pg_fresh_dsn, tmp_path) as life:
        vessel = started_vessel(life, client)
        first = life.worker("worker-1", model_script="hang", model_deadline_s=60)
        run_id = submit_delegate(client, vessel, "drain-1")
        assert run_id is not None
        job_id = job_of(life, run_id)
        wait_job(life, job_id, "worker-1 inside its call", calling(1))

        sent = time.monotonic()
        first.signal(signal.SIGTERM)
        code = first.wait_exit(20)
        took = time.monotonic() - sent
        life.note("worker-1 exited after SIGTERM", exit_code=code, seconds=round(took, 2))
        assert code == 0, first.output()[-2000:]
        assert 9.0 <= took <= 12.5, took  # the attempt ran out the 10 s bound
        assert "drain bound reached" in first.output()
        assert "one attempt left to its lease" in first.output()
        left = leased_row(life.dsn, job_id)
        assert left is not None and left["lease_owner"] == "worker-1"
        assert left["state"] == "queued"  # nothing written after the bound: recoverable

        second = life.worker("worker-2")
        view = wait_run(client, vessel, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)
        job = leased_row(life.dsn, job_id)
        assert job is not None and view["status"] == "DONE", view
        assert event_kinds(job) == [("started", 1), ("expired_lease", 1), ("started", 2),
                                    ("completed", 2)]
        second.signal(signal.SIGTERM)
        assert second.wait_exit(15) == 0
        proved(life, run_id, "DONE")


def test_sigterm_lets_an_attempt_that_ends_within_the_bound_finish(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("drain_completes", "SIGTERM during a 2 s call: the attempt stages",
                   pg_fresh_dsn, tmp_path) as life:
        vessel = started_vessel(life, client)
        worker = life.worker("worker-1", model_script="slow:2")
        run_id = submit_delegate(client, vessel, "drain-2")
        assert run_id is not None
        job_id = job_of(life, run_id)
        wait_job(life, job_id, "worker-1 inside its call", calling(1))

        sent = time.monotonic()
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        took = time.monotonic() - sent
        life.note("worker-1 exited after SIGTERM", seconds=round(took, 2))
        assert took < 9.0, took
        assert "drain bound reached" not in worker.output()
        job = leased_row(life.dsn, job_id)
        assert job is not None and job["state"] == "published" and job["lease_owner"] is None
        assert event_kinds(job) == [("started", 1), ("completed", 1)]

        view = wait_run(client, vessel, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)
        assert view["status"] == "DONE", view
        proved(life, run_id, "DONE")


# -- (d) a hung model request ------------------------------------------------------------


def test_a_hung_model_request_times_out_and_a_bounded_retry_publishes(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("hung_model_request", "the first call never answers; 1.5 s deadline",
                   pg_fresh_dsn, tmp_path) as life:
        vessel = started_vessel(life, client)
        worker = life.worker("worker-1", model_script="hang", model_deadline_s=1.5)
        run_id = submit_delegate(client, vessel, "hung-1")
        assert run_id is not None
        view = wait_run(client, vessel, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)
        job = leased_row(life.dsn, job_of(life, run_id))
        assert job is not None and view["status"] == "DONE", view

        assert event_kinds(job) == [("started", 1), ("failed", 1), ("started", 2),
                                    ("completed", 2)]
        hung = job["events"][1]
        assert "model deadline of 1.5 s" in hung["detail"]
        assert hung["usage"] is None  # never returned: unknown, not zero
        assert job["attempts_used"] == 2 and job["model_calls_reserved"] == 2
        assert worker.returncode is None  # the hung call never hung the worker
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        proved(life, run_id, "DONE")


# -- (e) lost acknowledgements -----------------------------------------------------------


def test_a_vessel_killed_after_submitting_adopts_the_job_and_never_starts_it_twice(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("lost_submit_acknowledgement",
                   "vessel serve SIGKILLed at delegate.submitted, before its park",
                   pg_fresh_dsn, tmp_path) as life:
        boot1 = life.vessel("vessel-boot1", crash_at="delegate.submitted", migrate=True)
        boot1.wait_ready(client)
        run_id = submit_delegate(client, boot1, "lost-submit-1")
        code = boot1.wait_death()
        life.note("boot 1 died", exit_code=code)
        assert code == -signal.SIGKILL and "crash plan delegate.submitted" in boot1.output()
        job_id = the_agent_job(life.dsn)
        assert job_id is not None
        received = leased_row(life.dsn, job_id)
        assert received is not None and received["state"] == "queued"  # the commit landed

        boot2 = life.vessel("vessel-boot2", port=boot1.port)
        boot2.wait_ready(client)
        replay = submit_delegate(client, boot2, "lost-submit-1")
        assert replay is not None and (run_id is None or replay == run_id)
        worker = life.worker("worker-1")
        view = wait_run(client, boot2, replay, ("DONE", "FAILED"), DONE_WITHIN_S)
        assert view["status"] == "DONE", view
        job = leased_row(life.dsn, job_id)
        assert job is not None and job["fence"] == 1  # adopted: claimed and run once
        assert event_kinds(job) == [("started", 1), ("completed", 1)]
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        proved(life, replay, "DONE")


def test_a_worker_killed_after_its_stage_committed_is_not_run_again(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("lost_stage_acknowledgement",
                   "vessel jobs work SIGKILLed right after stage committed",
                   pg_fresh_dsn, tmp_path) as life:
        vessel = started_vessel(life, client)
        first = life.worker("worker-1", crash_at="stage")
        run_id = submit_delegate(client, vessel, "lost-stage-1")
        assert run_id is not None
        code = first.wait_exit(20)
        assert code == -signal.SIGKILL and "VESSEL_JOBS_CRASH_AT=stage:1" in first.output()
        job_id = job_of(life, run_id)
        staged = leased_row(life.dsn, job_id)
        assert staged is not None and staged["state"] == "published"
        life.note("worker-1 died after its stage committed")

        second = life.worker("worker-2")
        view = wait_run(client, vessel, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)
        assert view["status"] == "DONE", view
        time.sleep(1.0)  # worker-2 polls several times: nothing is left to claim
        job = leased_row(life.dsn, job_id)
        assert job is not None and job["fence"] == 1
        assert event_kinds(job) == [("started", 1), ("completed", 1)]
        second.signal(signal.SIGTERM)
        assert second.wait_exit(15) == 0
        assert "stopped after 0 attempt(s)" in second.output()
        proved(life, run_id, "DONE")


def test_a_lost_model_reply_is_retried_with_its_usage_unknown(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("lost_model_reply", "the provider's reply is lost in transit once",
                   pg_fresh_dsn, tmp_path) as life:
        vessel = started_vessel(life, client)
        worker = life.worker("worker-1", model_script="lost")
        run_id = submit_delegate(client, vessel, "lost-reply-1")
        assert run_id is not None
        view = wait_run(client, vessel, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)
        assert view["status"] == "DONE", view
        job = leased_row(life.dsn, job_of(life, run_id))
        assert job is not None
        assert event_kinds(job) == [("started", 1), ("failed", 1), ("started", 2),
                                    ("completed", 2)]
        lost = job["events"][1]
        assert "ConnectionResetError" in lost["detail"] and lost["usage"] is None
        assert job["model_calls_reserved"] == 2  # the lost call stays spent
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        proved(life, run_id, "DONE")


# -- (f) repeated crashes ----------------------------------------------------------------


def test_repeated_crashes_spend_the_budget_and_the_run_fails_honestly(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("repeated_crashes",
                   "two workers die inside their calls and the Vessel dies between them",
                   pg_fresh_dsn, tmp_path) as life:
        boot1 = started_vessel(life, client, "vessel-boot1")
        run_id = submit_delegate(client, boot1, "crashes-1")
        assert run_id is not None
        wait_run(client, boot1, run_id, ("AWAITING_DELEGATE",), DONE_WITHIN_S)
        job_id = job_of(life, run_id)

        first = life.worker("worker-1", crash_at="reserve_model_call")
        assert first.wait_exit(20) == -signal.SIGKILL
        life.note("worker-1 died with call 1 reserved")
        boot1.kill()
        life.note("vessel boot 1 killed while the Run waits")
        boot2 = started_vessel(life, client, "vessel-boot2", port=boot1.port)

        second = life.worker("worker-2", crash_at="reserve_model_call")
        assert second.wait_exit(20) == -signal.SIGKILL  # after worker-1's lease expired
        life.note("worker-2 died with call 2 reserved")
        spent = leased_row(life.dsn, job_id)
        assert spent is not None and spent["model_calls_reserved"] == 2

        third = life.worker("worker-3")
        view = wait_run(client, boot2, run_id, ("DONE", "FAILED"), DONE_WITHIN_S)
        assert view["status"] == "FAILED" and "ended FAILED" in view["error"], view
        job = leased_row(life.dsn, job_id)
        assert job is not None and job["state"] == "exhausted"
        assert event_kinds(job) == [("started", 1), ("expired_lease", 1), ("started", 2),
                                    ("expired_lease", 2), ("failed", 2)]
        assert EXHAUSTED_CALLS in job["error"]
        assert job["attempts_used"] == 2 and job["model_calls_reserved"] == 2
        assert all(e["usage"] is None for e in job["events"])  # nothing came back: unknown
        third.signal(signal.SIGTERM)
        assert third.wait_exit(15) == 0
        proved(life, run_id, "FAILED")


# -- cancellation across processes ---------------------------------------------------------


def test_cancel_waits_for_the_workers_live_lease_before_recording_cancelled(
    pg_fresh_dsn: str, tmp_path: Path, client: httpx.Client
) -> None:
    with lifecycle("cancel_under_a_live_lease",
                   "POST /cancel while a worker holds the job's lease",
                   pg_fresh_dsn, tmp_path) as life:
        vessel = started_vessel(life, client)
        worker = life.worker("worker-1", model_script="hang", model_deadline_s=4,
                             retry_base_s=60)
        run_id = submit_delegate(client, vessel, "cancel-1")
        assert run_id is not None
        job_id = job_of(life, run_id)
        wait_job(life, job_id, "worker-1 inside its call", calling(1))

        answer = client.post(f"{vessel.url}/runs/{run_id}/cancel", headers=AUTH)
        life.note("cancel answered", status=answer.status_code, run=answer.json()["status"])
        assert answer.status_code == 202 and answer.json()["status"] == "CANCELLING"
        held = leased_row(life.dsn, job_id)
        assert held is not None and held["lease_owner"] == "worker-1"  # not overridden

        view = wait_run(client, vessel, run_id, ("CANCELLED",), DONE_WITHIN_S)
        job = leased_row(life.dsn, job_id)
        assert job is not None and job["state"] == "failed" and job["error"] == WITHDRAWN
        released = _event_time(life, job_id, "failed", fence=1, first=True)
        assert released is not None
        withdrawn = _event_time(life, job_id, "failed", fence=1, first=False)
        assert withdrawn is not None and datetime.fromisoformat(view["updated_at"]) >= withdrawn
        assert event_kinds(job) == [("started", 1), ("failed", 1), ("failed", 1)]
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit(15) == 0
        proved(life, run_id, "CANCELLED")


def _event_time(life: Lifecycle, job_id: str, kind: str, fence: int,
                first: bool) -> datetime | None:
    import psycopg

    order = "ASC" if first else "DESC"
    with psycopg.connect(life.dsn) as conn:
        row = conn.execute(
            f"SELECT at FROM leased_job_event WHERE job_id = %s AND kind = %s AND fence = %s "
            f"ORDER BY idx {order} LIMIT 1", (job_id, kind, fence)).fetchone()
    return None if row is None else row[0]

