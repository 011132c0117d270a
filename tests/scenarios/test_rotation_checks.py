"""finished_job_rotated (sim.rotation_checks): a claim stuck past the retry budget fails its
job behind a QUEUED Run, and recovery must rotate that Run rather than call it fencing."""

from __future__ import annotations

from sim.kernel import run_simulation


def test_a_job_failed_behind_a_queued_run_is_rotated() -> None:
    # crowded seed 2: a stuck claim fails its hop's job while the Run waits QUEUED.
    result = run_simulation(2, "crowded", "swarm")
    assert result.invariant is None, result.invariant
    assert "failed" in {result.jobs[k] for k in result.world.stuck_claims}


def test_a_recovery_that_calls_a_finished_job_fencing_is_caught() -> None:
    broken = run_simulation(2, "crowded", "swarm", break_name="finished_job_fenced")
    assert broken.invariant == "finished_job_rotated"
