"""Every registered scenario holds every invariant over a fixed seed set."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime.recovery.debts import DebtReport
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


def test_a_crashed_boot_stays_down_for_its_restart_delay() -> None:
    """Each simulated restart waits a delay drawn from `restart_delay_s` (crashloop:
    0.5-4 s) before the next boot starts: while down, nobody serves the database.
    (The delay once slept inside the dead boot's cancelled scope and was zero.)"""
    result = run_simulation(1, "crashloop", "swarm")
    events = [json.loads(line) for line in result.trace_lines]
    crashes = {e["boot"]: e["t"] for e in events if e["event"] == "boot.crash"}
    starts = {e["boot"]: e["t"] for e in events if e["event"] == "boot.start"}
    gaps = [starts[boot + 1] - at for boot, at in crashes.items() if boot + 1 in starts]
    assert len(gaps) >= 3, crashes
    assert all(0.5 <= round(gap, 6) <= 4.0 for gap in gaps), gaps


def test_crowded_pages_past_one_page_and_replays_identically() -> None:
    """`crowded` holds more QUEUED Runs than one recovery page at a restart, so the
    next startup's report names more than PAGE_SIZE deliveries; and it is as
    deterministic as the rest (same seed, same trace)."""
    from runtime.recovery.pages import PAGE_SIZE

    first, again = run_simulation(1, "crowded", "swarm"), run_simulation(1, "crowded", "swarm")
    assert first.ok and first.trace_hash == again.trace_hash
    done = [json.loads(line)["data"] for line in first.trace_lines
            if '"event":"startup.done"' in line]
    assert max(sum(d["deliveries"].values()) for d in done) > PAGE_SIZE


def test_startup_debts_needs_the_relay_to_pay_what_startup_owes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last startup before heal fails its evidence repair: only that boot's relay
    (no lease, no later startup) can pay it, so startup must hand it over."""
    from runtime.recovery import reconcile

    healthy = run_simulation(1, "startup_debts", "swarm")
    assert healthy.ok and healthy.coverage["kinds"].get("startup_step_fail", 0) > 0
    real = reconcile.pay_startup_debts

    async def forgetful(*args: Any, **kwargs: Any) -> DebtReport:
        report = await real(*args, **kwargs)
        report.evidence_owed = {}  # owed, but never handed to the relay
        return report

    monkeypatch.setattr(reconcile, "pay_startup_debts", forgetful)
    assert run_simulation(1, "startup_debts", "swarm").invariant == "terminal_evidence_once"


def test_a_gate_refused_for_an_unknown_field_is_no_gate_outcome_violation() -> None:
    """gate_outcome judges only content naming nothing but the gate's bounded fields:
    crashloop seed 278 re-sends a consent_gate key with an extra `variant` field, which
    GateState rightly refuses (a false alarm the CI campaign found at swarm 1-300)."""
    result = run_simulation(278, "crashloop", "swarm")
    assert result.ok, result.violation
