"""failure_has_cause and lost_only_after_death (sim/outcome_checks.py) can fail, and hold."""

from __future__ import annotations

import pytest

from runtime import faults
from runtime.faults import CATALOGUE
from runtime.worker import PINNED_PATTERN_UNAVAILABLE
from sim import outcome_checks
from sim.faults.plan import AtPoint, FaultKind, FaultPlan, PlannedFault
from sim.kernel import SimResult, run_simulation
from sim.outcome_checks import WINDOW_OUTCOMES
from sim.scenarios.windows import window_scenario


def test_a_worker_misreading_the_pin_is_caught_at_the_first_seed() -> None:
    result = run_simulation(1, "basic", "calm", break_name="pin_misread")
    assert result.invariant == "failure_has_cause"
    assert result.violation is not None
    assert "is registered" in result.violation.message


def test_failures_of_a_swarm_seed_all_have_a_cause() -> None:
    # crashloop fails Runs as lost, on hardware and on refused delegations: all legal.
    result = run_simulation(3, "crashloop", "swarm")
    assert result.ok, result.violation
    assert result.ledger is not None
    assert any(r.status.value == "FAILED" for r in result.ledger.runs)


def test_every_catalogued_fault_point_has_a_designed_outcome() -> None:
    missing = sorted(set(CATALOGUE) - set(WINDOW_OUTCOMES))
    unknown = sorted(set(WINDOW_OUTCOMES) - set(CATALOGUE))
    assert missing == [], f"catalogued points with no designed outcome: {missing}"
    assert unknown == [], f"designed outcomes of points not in the catalogue: {unknown}"


def _crash_at(point: str, pattern: str, *, break_name: str | None = None) -> SimResult:
    plan = FaultPlan(faults=[PlannedFault(trigger=AtPoint(point=point, nth=1),
                                          fault=FaultKind.CRASH)])
    return run_simulation(1, window_scenario(pattern), "calm", plan, break_name=break_name)


def test_a_crash_at_a_point_without_a_designed_outcome_is_a_violation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    table = {k: v for k, v in WINDOW_OUTCOMES.items() if k != faults.CLAIM_COMMITTED}
    monkeypatch.setattr(outcome_checks, "WINDOW_OUTCOMES", table)
    result = _crash_at(faults.CLAIM_COMMITTED, "echo")
    assert result.invariant == "crash_window_outcome"
    assert result.violation is not None and "no designed outcome" in result.violation.message


@pytest.mark.parametrize(("point", "pattern", "break_name"), [
    (faults.CONSENT_ROW_SAVED, "consent_gate", "window_never_parked"),
    (faults.DELEGATE_SUBMITTED, "delegate", "window_never_parked"),
    (faults.CLAIM_COMMITTED, "echo", "orphan_job_left_active"),
])
def test_a_window_ending_legally_but_not_as_designed_is_caught(
        point: str, pattern: str, break_name: str) -> None:
    assert _crash_at(point, pattern).ok  # the unbroken runtime ends the window as designed
    result = _crash_at(point, pattern, break_name=break_name)
    assert result.invariant == "crash_window_outcome", (result.invariant, result.violation)
    assert result.violation is not None and point in result.violation.message


def test_a_worker_running_the_latest_version_of_an_unregistered_pin_is_caught() -> None:
    # rolling_upgrade: a newer release admits Runs pinned one version up.
    result = run_simulation(1, "rolling_upgrade", "swarm", break_name="pin_falls_back_to_latest")
    assert result.invariant == "unregistered_pin_fails"
    assert result.violation is not None and "is DONE" in result.violation.message


def test_runs_of_an_unregistered_pin_fail_as_pinned_pattern_unavailable() -> None:
    result = run_simulation(1, "rolling_upgrade", "swarm")
    assert result.ok, result.violation
    assert result.ledger is not None
    unpinned = [r for r in result.ledger.runs if r.pattern_version > 1]
    assert unpinned and all(r.error == PINNED_PATTERN_UNAVAILABLE for r in unpinned)
