"""Delegated jobs run by a real second process, and the worker's faults (issue 8 item 6).

Each test runs one named check of `harness.receipts.leased_checks` (the
same checks `harness receipts` proves): real processes on a fresh
PostgreSQL database, a `vessel serve --agents leased --workspace delegates`
(the Vessel submits a `delegate` Run's AgentJob as a leased job) and one or
more `vessel jobs work` processes (short leases: 3 s, renewed every second,
so no check waits 90 s), driven over HTTP and with signals. The check
requires every step of its scenario and then `harness.receipts.leased`
reads every row that matters and checks the budgets held and no evidence was
lost (one leased job and one evidence row per AgentJob, the request
preserved exactly, attempts and reserved calls within their limits, one
`started` event per reserved call, every claim closed), plus the
simulator's history-free invariants. The test asserts the receipt proved it
and reads the check's facts back from the receipt (written into its tmp dir).

Seed 004_85033eb8fc772f12.txt ("Real process tests cover restart, bounded
CLI drain, a hung request, lost acknowledgements and repeated crashes") and
seed 000_81a5c720b14d934a.txt ("Delegated AgentJob labor").
"""

from __future__ import annotations

import json
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from harness.receipts.leased_checks import LEASED_CHECKS, run_check
from runtime.adapters.leased_agents import WITHDRAWN
from runtime.jobs.rules import EXHAUSTED_CALLS
from tests.restart.kept import keep

pytestmark = [pytest.mark.restart, pytest.mark.timeout(180)]


def proved(name: str, pg_dsn: str, tmp_path: Path) -> dict[str, Any]:
    receipt = run_check(name, pg_dsn, tmp_path)
    assert receipt["verdict"] == "proved", receipt.get("reason") or json.dumps(
        receipt.get("problems"), indent=2)
    assert receipt["window"] == name and not receipt["problems"]
    assert all(inv["held"] for inv in receipt["invariants"])
    assert json.loads((tmp_path / f"{name}.json").read_text())["verdict"] == "proved"
    keep(tmp_path, name)
    return receipt


def the_job(receipt: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The one leased job of the check, and its attempt events, as the receipt holds them."""
    (record,) = receipt["leased"]
    return record["job"], record["events"]


def kinds(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(e["kind"], int(e["fence"])) for e in events]


def process(receipt: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [p for p in receipt["processes"] if p["name"] == name]
    return found


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


# -- the catalogued window inside a real worker ----------------------------------------


def test_a_worker_killed_at_inference_returned_leaves_its_call_spent_and_is_reclaimed(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.worker_killed_at_inference_returned", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    assert receipt["final"] == "DONE"
    assert receipt["observed"]["exit_code"] == -signal.SIGKILL
    assert process(receipt, "worker-1")["crash_point"] == "job.inference_returned"
    assert kinds(events) == [("started", 1), ("expired_lease", 1), ("started", 2),
                             ("completed", 2)]
    assert job["model_calls_reserved"] == 2 and job["state"] == "published"


# -- (a) the job crosses processes ------------------------------------------------------


def test_a_delegate_run_is_executed_by_a_separate_worker_process(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.cross_process_delegate", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    seen = receipt["observed"]
    assert receipt["final"] == "DONE"
    assert seen["answer"]["assertions"] == [{"subject": "task", "value": "translate"}]
    assert seen["answer"]["leased_job"] == seen["job_id"] == seen["agent_job_id"] == job["id"]
    assert job["state"] == "published" and job["fence"] == 1
    assert kinds(events) == [("started", 1), ("completed", 1)]
    assert {e["worker"] for e in events} == {"worker-1"}  # the other process
    assert events[1]["usage"] is not None
    assert seen["worker_exit"] == 0
    assert seen["vessel_exit"] in (0, -signal.SIGTERM)
    vessel, worker = process(receipt, "vessel"), process(receipt, "worker-1")
    assert vessel["pid"] != worker["pid"] and worker["kind"] == "vessel jobs work"


# -- (b) a worker killed mid-job, another reclaiming after the lease expired ------------


def test_a_worker_killed_mid_job_is_reclaimed_by_another_after_lease_expiry(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.worker_killed_reclaimed", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    seen = receipt["observed"]
    assert at(seen["renewed_lease_expires_at"]) > at(seen["claimed_lease_expires_at"])
    assert process(receipt, "worker-1")["exit_signal"] == "SIGKILL"
    assert seen["killed_lease_owner"] == "worker-1" and seen["killed_calls_reserved"] == 1
    assert receipt["final"] == "DONE"
    assert kinds(events) == [("started", 1), ("expired_lease", 1), ("started", 2),
                             ("completed", 2)]
    # never inside a live lease
    assert at(seen["reclaimed_at"]) >= at(seen["killed_lease_expires_at"])
    assert job["attempts_used"] == 2 and job["model_calls_reserved"] == 2
    assert [e["worker"] for e in events] == ["worker-1", "worker-1", "worker-2", "worker-2"]
    # the killed call's usage was never returned: no completed event, not a zero bill
    assert not any(e["kind"] == "completed" and e["fence"] == 1 for e in events)
    assert process(receipt, "worker-2")["exit_code"] == 0


# -- (c) bounded drain on SIGTERM --------------------------------------------------------


def test_sigterm_drains_for_at_most_ten_seconds_and_the_lease_stays_recoverable(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.sigterm_drain_bounded", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    assert job["state"] == "published"
    seen = receipt["observed"]
    assert seen["drain_exit"] == 0
    assert 9.0 <= seen["drain_s"] <= 12.5, seen["drain_s"]  # the attempt ran out the 10 s bound
    log = (tmp_path / "leased.sigterm_drain_bounded" / "worker-1.log").read_text()
    assert "drain bound reached" in log and "one attempt left to its lease" in log
    # nothing written after the bound: recoverable
    assert seen["left_lease_owner"] == "worker-1" and seen["left_state"] == "queued"
    assert receipt["final"] == "DONE"
    assert kinds(events) == [("started", 1), ("expired_lease", 1), ("started", 2),
                             ("completed", 2)]
    assert process(receipt, "worker-2")["exit_code"] == 0


def test_sigterm_lets_an_attempt_that_ends_within_the_bound_finish(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.sigterm_attempt_finishes", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    seen = receipt["observed"]
    assert seen["drain_exit"] == 0 and seen["drain_s"] < 9.0, seen
    log = (tmp_path / "leased.sigterm_attempt_finishes" / "worker-1.log").read_text()
    assert "drain bound reached" not in log
    assert job["state"] == "published" and job["lease_owner"] is None
    assert kinds(events) == [("started", 1), ("completed", 1)]
    assert receipt["final"] == "DONE"


# -- (d) a hung model request ------------------------------------------------------------


def test_a_hung_model_request_times_out_and_a_bounded_retry_publishes(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.hung_model_request", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    assert receipt["final"] == "DONE"
    assert kinds(events) == [("started", 1), ("failed", 1), ("started", 2), ("completed", 2)]
    hung = events[1]
    assert "model deadline of 1.5 s" in hung["detail"]
    assert hung["usage"] is None  # never returned: unknown, not zero
    assert job["attempts_used"] == 2 and job["model_calls_reserved"] == 2
    assert receipt["observed"]["worker_alive_after_hang"]  # the hung call never hung the worker
    assert process(receipt, "worker-1")["exit_code"] == 0


# -- (e) lost acknowledgements -----------------------------------------------------------


def test_a_vessel_killed_after_submitting_adopts_the_job_and_never_starts_it_twice(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.vessel_killed_after_submit", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    seen = receipt["observed"]
    assert seen["boot1_exit"] == -signal.SIGKILL
    boot1 = process(receipt, "vessel-boot1")
    assert boot1["crash_plan"] == "delegate.submitted" and boot1["exit_signal"] == "SIGKILL"
    assert seen["received_state"] == "queued"  # the commit landed before the SIGKILL
    assert seen["boot1_run_id"] is None or seen["boot1_run_id"] == receipt["run_id"]
    assert receipt["final"] == "DONE"
    assert job["fence"] == 1  # adopted: claimed and run once
    assert kinds(events) == [("started", 1), ("completed", 1)]
    assert process(receipt, "worker-1")["exit_code"] == 0


def test_a_worker_killed_after_its_stage_committed_is_not_run_again(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.worker_killed_after_stage", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    assert receipt["observed"]["worker1_exit"] == -signal.SIGKILL
    assert process(receipt, "worker-1")["crash_plan"] == "stage"
    assert receipt["observed"]["staged_state"] == "published"
    assert receipt["final"] == "DONE"
    assert job["fence"] == 1 and job["state"] == "published"
    assert kinds(events) == [("started", 1), ("completed", 1)]
    assert process(receipt, "worker-2")["exit_code"] == 0
    log = (tmp_path / "leased.worker_killed_after_stage" / "worker-2.log").read_text()
    assert "stopped after 0 attempt(s)" in log


def test_a_lost_model_reply_is_retried_with_its_usage_unknown(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.lost_model_reply", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    assert receipt["final"] == "DONE"
    assert kinds(events) == [("started", 1), ("failed", 1), ("started", 2), ("completed", 2)]
    lost = events[1]
    assert "ConnectionResetError" in lost["detail"] and lost["usage"] is None
    assert job["model_calls_reserved"] == 2  # the lost call stays spent
    assert process(receipt, "worker-1")["exit_code"] == 0


# -- (f) repeated crashes ----------------------------------------------------------------


def test_repeated_crashes_spend_the_budget_and_the_run_fails_honestly(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.repeated_crashes", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    seen = receipt["observed"]
    assert seen["worker1_exit"] == seen["worker2_exit"] == -signal.SIGKILL
    assert seen["calls_reserved_after_crashes"] == 2
    assert process(receipt, "vessel-boot1")["exit_signal"] == "SIGKILL"
    assert receipt["final"] == "FAILED" and "ended FAILED" in receipt["run_error"]
    assert job["state"] == "exhausted"
    assert kinds(events) == [("started", 1), ("expired_lease", 1), ("started", 2),
                             ("expired_lease", 2), ("failed", 2)]
    assert EXHAUSTED_CALLS in job["error"]
    assert job["attempts_used"] == 2 and job["model_calls_reserved"] == 2
    assert all(e["usage"] is None for e in events)  # nothing came back: unknown
    assert process(receipt, "worker-3")["exit_code"] == 0


# -- cancellation across processes ---------------------------------------------------------


def test_cancel_waits_for_the_workers_live_lease_before_recording_cancelled(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.cancel_waits_for_lease", pg_dsn, tmp_path)
    job, events = the_job(receipt)
    seen = receipt["observed"]
    assert seen["cancel_http_status"] == 202 and seen["cancel_run_status"] == "CANCELLING"
    assert seen["held_lease_owner"] == "worker-1"  # a live lease is not overridden
    assert receipt["final"] == "CANCELLED"
    assert job["state"] == "failed" and job["error"] == WITHDRAWN
    assert seen["released_at"] is not None
    assert at(seen["cancelled_at"]) >= at(seen["withdrawn_at"])
    assert kinds(events) == [("started", 1), ("failed", 1), ("failed", 1)]
    assert process(receipt, "worker-1")["exit_code"] == 0


# -- a late result from an old fence (the job.inference_returned window) -------------------


def test_a_stalled_workers_late_result_from_an_old_fence_never_lands_and_its_usage_is_kept(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = proved("leased.late_result_fenced_out", pg_dsn, tmp_path)
    assert receipt["proves"] == "job.inference_returned"
    job, events = the_job(receipt)
    (record,) = receipt["leased"]
    seen = receipt["observed"]
    assert process(receipt, "worker-1")["signals"][:2] == ["SIGSTOP", "SIGCONT"]
    assert receipt["final"] == "DONE"
    assert kinds(events) == [("started", 1), ("expired_lease", 1), ("started", 2),
                             ("completed", 2), ("completed", 1)]
    late = events[4]
    assert late["worker"] == "worker-1" and late["refused"] == "stale_fence"
    assert late["usage"] is not None  # the late reply's usage is kept
    assert at(seen["reclaimed_at"]) >= at(seen["stalled_lease_expires_at"])
    assert job["state"] == "published" and job["fence"] == 2 and job["settled_fence"] == 2
    assert job["bundle"] == seen["bundle"]
    assert [i["fence"] for i in record["interpretations"]] == [2]
    assert job["attempts_used"] == 2 and job["model_calls_reserved"] == 2
    assert process(receipt, "worker-1")["exit_code"] == 0
    assert process(receipt, "worker-2")["exit_code"] == 0


def test_every_leased_check_has_a_test() -> None:
    tested = {
        "leased.cross_process_delegate", "leased.worker_killed_reclaimed",
        "leased.sigterm_drain_bounded", "leased.sigterm_attempt_finishes",
        "leased.hung_model_request", "leased.vessel_killed_after_submit",
        "leased.worker_killed_after_stage", "leased.lost_model_reply",
        "leased.repeated_crashes", "leased.cancel_waits_for_lease",
        "leased.late_result_fenced_out", "leased.worker_killed_at_inference_returned",
    }
    assert set(LEASED_CHECKS) == tested
