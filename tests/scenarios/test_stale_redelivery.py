"""Late redelivery of an old hop key (FaultKind.STALE_REDELIVERY, issue M9): the
broker hands a finished hop's key to a worker again once the Run's sequence moved
on. The exact claim refuses it and nothing else happens (stale_hop_inert)."""

from __future__ import annotations

import json

from sim.faults.plan import AtPoint, FaultKind, FaultPlan, PlannedFault
from sim.kernel import SimResult, run_simulation
from sim.scenarios.windows import window_scenario

PLAN = FaultPlan(faults=[PlannedFault(trigger=AtPoint(point="broker.redeliver", nth=1),
                                      fault=FaultKind.STALE_REDELIVERY, amount=120.0)])


def redeliver_after_the_wait(break_name: str | None = None) -> SimResult:
    """A consent Run: its first hop parks; once the verdict re-admits it (seq 1),
    the parked hop's key run:<id>:0 is delivered again."""
    return run_simulation(1, window_scenario("consent_gate"), "calm", PLAN,
                          break_name=break_name)


def redelivered(result: SimResult) -> list[dict[str, object]]:
    return [json.loads(line)["data"] for line in result.trace_lines
            if '"event":"job.redelivered"' in line]


def test_an_old_hop_key_redelivered_after_rotation_is_refused_without_effect() -> None:
    result = redeliver_after_the_wait()
    assert result.ok, (result.invariant, result.violation)
    assert result.ledger is not None and len(result.ledger.runs) == 1
    run = result.ledger.runs[0]
    assert [d["key"] for d in redelivered(result)] == [f"run:{run.id}:0"]
    assert redelivered(result)[0]["moved_on"] is True
    assert run.status.value == "DONE" and run.seq == 1


def test_a_worker_that_claims_the_current_sequence_for_a_stale_key_is_caught() -> None:
    result = redeliver_after_the_wait("stale_claim_catches_up")
    assert result.invariant == "stale_hop_inert", (result.invariant, result.violation)
    assert result.violation is not None and ":0 made claim_delivery" in result.violation.message


def test_swarm_draws_stale_redelivery_at_a_modest_rate() -> None:
    from sim.faults.options import swarm
    from sim.rng import Streams

    rates = [swarm(s.faults, s.swarm).stale_redelivery_per_hop
             for s in (Streams.from_seed(seed) for seed in range(1, 41))]
    assert 0 < sum(1 for r in rates if r > 0) < 40
    assert max(rates) <= 0.1
