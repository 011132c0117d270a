"""dequeued_publish_acknowledged (sim.ack_checks) judges only the task that read the
delivery row: a task spawned after the read inherits the context, not the debt."""

from __future__ import annotations

from sim.kernel import run_simulation


def test_a_spawned_abort_watcher_probing_its_job_owes_no_acknowledgement() -> None:
    # crashloop seed 24: a worker's abort watcher, spawned after its worker read the
    # PENDING row, probes the job it dequeued; judged as the reader, it failed the rule.
    result = run_simulation(24, "crashloop", "swarm")
    assert result.invariant is None, result.invariant


def test_a_recovery_that_skips_the_acknowledgement_is_caught() -> None:
    broken = run_simulation(5, "two_vessels", "swarm", break_name="dequeued_ack_skipped")
    assert broken.invariant == "dequeued_publish_acknowledged"
    assert run_simulation(5, "two_vessels", "swarm").invariant is None
