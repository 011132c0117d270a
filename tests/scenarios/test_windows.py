"""Per-window crash tests (DESIGN section 5): crash exactly at one named
point, restart, and assert the outcome the seeds prescribe for that window,
not only the invariants."""

from __future__ import annotations

import json
from typing import Any

from runtime import faults
from runtime.models import ConsentStatus, DeliveryState, RunStatus
from runtime.recovery.orphans import LOST
from sim.faults.plan import AtPoint, FaultKind, FaultPlan, PlannedFault
from sim.kernel import SimResult, run_simulation
from sim.scenarios.windows import window_scenario


def crash_at(point: str, pattern: str, nth: int = 1, **kw: Any) -> SimResult:
    plan = FaultPlan(faults=[PlannedFault(trigger=AtPoint(point=point, nth=nth),
                                          fault=FaultKind.CRASH)])
    result = run_simulation(1, window_scenario(pattern, **kw), "calm", plan)
    assert result.ok, (result.invariant, result.error, result.violation)
    assert result.coverage["fires"].get(point) == 1, f"the plan never reached {point}"
    assert result.boots >= 2
    return result


def the_run(result: SimResult) -> Any:
    assert result.ledger is not None and len(result.ledger.runs) == 1
    return result.ledger.runs[0]


def startups(result: SimResult) -> list[dict[str, Any]]:
    return [json.loads(line)["data"] for line in result.trace_lines
            if '"event":"startup.done"' in line]


def published(result: SimResult) -> list[str]:
    return [json.loads(line)["data"]["key"] for line in result.trace_lines
            if '"event":"job.published"' in line]


def test_window_admit_committed_relay_publishes_the_same_key() -> None:
    r = crash_at(faults.ADMIT_COMMITTED, "echo")
    run = the_run(r)
    assert run.status is RunStatus.DONE and run.seq == 0
    assert published(r) == [f"run:{run.id}:0"]


def test_window_admit_committed_held_is_never_handed_out_without_its_owner() -> None:
    r = crash_at(faults.ADMIT_COMMITTED, "echo", held=True)
    run = the_run(r)
    # The client's replay re-ran its retention hook and released the same generation.
    assert run.status is RunStatus.DONE and run.seq == 0
    assert [s["deliveries"] for s in startups(r)][1] == {"held_refused": 1}


def test_window_publish_sent_before_ack_no_second_job() -> None:
    r = crash_at(faults.PUBLISH_SENT_BEFORE_ACK, "echo")
    run = the_run(r)
    assert run.status is RunStatus.DONE
    assert published(r) == [f"run:{run.id}:0"]


def test_window_claim_committed_fails_as_lost() -> None:
    r = crash_at(faults.CLAIM_COMMITTED, "echo")
    run = the_run(r)
    assert run.status is RunStatus.FAILED and run.error == LOST
    assert r.jobs[f"run:{run.id}:0"] in ("aborted", "aborting")


def test_window_effect_applied_fails_as_lost_and_never_applies_twice() -> None:
    r = crash_at(faults.EFFECT_APPLIED, "two_step")
    run = the_run(r)
    assert run.status is RunStatus.FAILED and run.error == LOST
    assert r.effects == {f"{run.id}:deliver": 1}


def test_window_settle_terminal_committed_keeps_the_step_written_with_truth() -> None:
    """An idle Step writer hands the terminal Step to settle_run (issue 17): truth and
    evidence commit together, so this crash leaves nothing to repair."""
    r = crash_at(faults.SETTLE_TERMINAL_COMMITTED, "echo")
    run = the_run(r)
    assert run.status is RunStatus.DONE
    assert r.ledger is not None
    terminal = [s for s in r.ledger.steps if s.kind == "run.done"]
    assert len(terminal) == 1 and terminal[0].data.get("repaired") is None
    assert r.ledger.steps[-1] == terminal[0]
    assert startups(r)[1]["repaired"] == 0


def test_window_settle_terminal_committed_repairs_a_step_settled_without() -> None:
    """A hop whose writer latched an earlier failure settles alone: the window
    between truth and its terminal Step is still there, and the Step is repaired
    exactly once after the crash."""
    plan = FaultPlan(faults=[
        PlannedFault(trigger=AtPoint(point="steps.append", nth=1),
                     fault=FaultKind.STEP_APPEND_FAIL),
        PlannedFault(trigger=AtPoint(point=faults.SETTLE_TERMINAL_COMMITTED, nth=1),
                     fault=FaultKind.CRASH),
    ])
    r = run_simulation(1, window_scenario("echo"), "calm", plan)
    assert r.ok, (r.invariant, r.error, r.violation)
    assert r.coverage["fires"].get(faults.SETTLE_TERMINAL_COMMITTED) == 1
    run = the_run(r)
    assert run.status is RunStatus.DONE
    assert r.ledger is not None
    terminal = [s for s in r.ledger.steps if s.kind == "run.done"]
    assert len(terminal) == 1 and terminal[0].data.get("repaired") is True
    assert startups(r)[1]["repaired"] == 1


def test_window_settle_evidence_written_checkpoint_deleted_never_revived() -> None:
    r = crash_at(faults.SETTLE_EVIDENCE_WRITTEN, "consent_gate")
    run = the_run(r)
    assert run.status is RunStatus.DONE
    assert r.ledger is not None and r.ledger.checkpoints == []


def test_window_consent_checkpoint_saved_no_consent_fails_as_lost() -> None:
    r = crash_at(faults.CONSENT_CHECKPOINT_SAVED, "consent_gate")
    run = the_run(r)
    assert run.status is RunStatus.FAILED and run.error == LOST
    assert r.ledger is not None and r.ledger.consents == []


def test_window_consent_row_saved_startup_parks_with_that_consent() -> None:
    r = crash_at(faults.CONSENT_ROW_SAVED, "consent_gate")
    run = the_run(r)
    assert startups(r)[1]["orphans"] == {"parked_consent": 1}
    assert r.ledger is not None and len(r.ledger.consents) == 1
    consent = r.ledger.consents[0]
    assert run.consent_id == consent.id and consent.status.decided
    assert run.status is RunStatus.DONE
    if consent.status is ConsentStatus.APPROVED:
        assert r.effects == {f"{run.id}:approved-1": 1}


def test_window_consent_decided_relay_refires_once() -> None:
    r = crash_at(faults.CONSENT_DECIDED, "consent_gate")
    run = the_run(r)
    assert run.status is RunStatus.DONE and run.seq == 1
    assert published(r) == [f"run:{run.id}:0", f"run:{run.id}:1"]


def test_window_readmit_committed_relay_publishes_the_new_hop() -> None:
    r = crash_at(faults.READMIT_COMMITTED, "consent_gate")
    run = the_run(r)
    assert run.status is RunStatus.DONE and run.seq == 1
    assert published(r).count(f"run:{run.id}:1") == 1


def test_window_delegate_checkpoint_saved_without_job_fails_as_lost() -> None:
    r = crash_at(faults.DELEGATE_CHECKPOINT_SAVED, "delegate")
    run = the_run(r)
    assert run.status is RunStatus.FAILED and run.error == LOST
    assert r.ledger is not None and r.ledger.agent_jobs == []


def test_window_delegate_submitted_parks_and_resumes_on_the_job_result() -> None:
    r = crash_at(faults.DELEGATE_SUBMITTED, "delegate")
    run = the_run(r)
    assert startups(r)[1]["orphans"] == {"parked_delegate": 1}
    assert r.ledger is not None and len(r.ledger.agent_jobs) == 1
    job = r.ledger.agent_jobs[0]
    assert run.agent_job_id == job.id and job.status.terminal
    assert run.status in (RunStatus.DONE, RunStatus.FAILED)  # the job's own outcome decides
    assert run.seq == 1


def test_window_hardware_awaiting_fails_as_lost() -> None:
    r = crash_at(faults.HARDWARE_AWAITING, "hardware", content={"needs": ["gpu"]})
    run = the_run(r)
    assert run.status is RunStatus.FAILED and run.error == LOST


def test_window_cancel_cancelling_committed_startup_finishes_with_containment() -> None:
    r = crash_at(faults.CANCEL_CANCELLING_COMMITTED, "consent_gate", cancel_at=5.0)
    run = the_run(r)
    assert run.status is RunStatus.CANCELLED
    assert r.ledger is not None
    assert all(c.status is not ConsentStatus.PENDING for c in r.ledger.consents)
    assert all(d.state.closed for d in r.ledger.deliveries)


def test_window_cancel_contained_finishes_cancelled() -> None:
    r = crash_at(faults.CANCEL_CONTAINED, "consent_gate", cancel_at=5.0)
    assert the_run(r).status is RunStatus.CANCELLED


def test_window_reconcile_started_next_boot_reconciles() -> None:
    r = crash_at(faults.RECONCILE_STARTED, "echo")
    assert the_run(r).status in (RunStatus.DONE, RunStatus.FAILED)


def test_window_release_committed_relay_publishes() -> None:
    r = crash_at(faults.RELEASE_COMMITTED, "echo", held=True)
    run = the_run(r)
    assert run.status is RunStatus.DONE
    assert r.ledger is not None
    assert [d.state for d in r.ledger.deliveries] == [DeliveryState.SETTLED]
