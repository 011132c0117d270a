"""lease_lapse_reported (sim/boot_checks.py) can fail, and holds."""

from __future__ import annotations

from sim.kernel import run_simulation


def test_a_keeper_trusting_a_late_renewal_is_caught_at_the_first_seed() -> None:
    # two_vessels seed 1: a renewal retries through an outage and returns after the lease
    # it renewed ran out; the registry still calls it live.
    result = run_simulation(1, "two_vessels", "swarm", break_name="lapse_only_when_told")
    assert result.invariant == "lease_lapse_reported"
    assert result.violation is not None and "lapses of its lease" in result.violation.message


def test_every_lapse_is_counted_in_leased_worlds() -> None:
    for scenario in ("two_vessels", "zombies"):
        result = run_simulation(1, scenario, "swarm")
        assert result.ok, (scenario, result.violation)
