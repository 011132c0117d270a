"""Every registered scenario holds every invariant over a fixed seed set."""

from __future__ import annotations

import pytest

from sim.kernel import run_simulation
from sim.scenarios import resolve

SCENARIOS = [s.name for s in resolve("all")]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_holds_over_fixed_seeds(scenario: str) -> None:
    results = [run_simulation(seed, scenario, "swarm") for seed in range(1, 16)]
    assert [(r.seed, r.invariant, r.error) for r in results if not r.ok] == []
    assert sum(r.runs for r in results) > 0


def test_waits_scenarios_really_park_and_resume() -> None:
    consent = run_simulation(2, "consent", "calm")
    kinds = {line.split('"event":"')[1].split('"')[0] for line in consent.trace_lines}
    assert "verdict" in kinds
    resumed = [line for line in consent.trace_lines if '"event":"job.published"' in line
               and ':1"' in line]
    assert resumed, "a decided consent re-admitted its Run under a new sequence"
