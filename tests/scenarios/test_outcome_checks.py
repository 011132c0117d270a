"""failure_has_cause and lost_only_after_death (sim/outcome_checks.py) can fail, and hold."""

from __future__ import annotations

from sim.kernel import run_simulation


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
