"""Pause here, act, resume (sim.pause) and boots that outlive their presumed death
(zombies, partitions, two Vessels; sim.boot_checks): deterministic per seed,
replayable from a recorded plan, and doing what they say (issue 18 item 2,
issue 15 item 1). The breaks they catch are tested with the rule catalogue
(tests/scenarios/test_rule_breaks.py)."""

from __future__ import annotations

import json

from sim.faults.plan import AtPoint, FaultKind, FaultPlan, PlannedFault
from sim.kernel import run_simulation
from sim.pause import ACTIONS


def _events(lines: list[str], name: str) -> list[dict[str, object]]:
    return [e for e in map(json.loads, lines) if e["event"] == name]


def test_the_same_seed_gives_the_same_trace_in_every_new_scenario() -> None:
    for scenario in ("paused", "zombies", "two_vessels"):
        first, again = (run_simulation(4, scenario, "swarm") for _ in range(2))
        assert first.ok, (scenario, first.invariant, first.error)
        assert first.trace_hash == again.trace_hash, scenario


def test_pauses_fire_every_action_and_replay_from_their_plan() -> None:
    seen: set[str] = set()
    for seed in range(1, 6):
        result = run_simulation(seed, "paused", "swarm")
        assert result.ok, (seed, result.invariant, result.error)
        pauses = [f for f in result.fired.faults if f.fault is FaultKind.PAUSE]
        seen |= {f.action for f in pauses if f.action is not None}
        begun = _events(result.trace_lines, "pause.begin")
        assert len(begun) == len(pauses)  # every pause held its hop and let it go on
    assert seen == {a.value for a in ACTIONS}
    profile = run_simulation(2, "paused", "swarm")
    replay = run_simulation(2, "paused", "swarm", profile.fired)
    assert replay.fired.faults == profile.fired.faults
    assert FaultPlan.model_validate_json(profile.fired.model_dump_json()) == profile.fired


def test_a_cancel_fired_between_dequeue_and_claim_wins_the_race() -> None:
    """The hop paused after its dequeue while the Run is cancelled: it must not claim."""
    base = run_simulation(1, "paused", "calm")
    first = next(e for e in _events(base.trace_lines, "job.dequeued"))
    key = str(first["data"]["key"])  # type: ignore[index]
    plan = FaultPlan(faults=[PlannedFault(
        trigger=AtPoint(point="broker.deliver", nth=1), fault=FaultKind.PAUSE, amount=5.0,
        action="cancel")])
    result = run_simulation(1, "paused", "calm", plan)
    assert result.ok, (result.invariant, result.error)
    acted = _events(result.trace_lines, "pause.acted")
    assert acted and acted[0]["data"]["action"] == "cancel"  # type: ignore[index]
    run_id = key.split(":")[1]
    run = next(r for r in result.ledger.runs if str(r.id) == run_id)  # type: ignore[union-attr]
    assert run.status.value == "CANCELLED" and run.started_at is None  # never claimed


def test_a_stalled_boot_is_succeeded_while_it_lives_and_then_resumes() -> None:
    for seed in range(1, 30):
        result = run_simulation(seed, "zombies", "swarm")
        assert result.ok, (seed, result.invariant, result.error)
        stalls = _events(result.trace_lines, "boot.stall")
        if not stalls:
            continue
        stall = stalls[0]
        t0, until = stall["t"], stall["t"] + stall["data"]["seconds"]  # type: ignore[operator,index]
        starts = [e for e in _events(result.trace_lines, "boot.start")
                  if t0 <= e["t"] < until]  # type: ignore[operator]
        assert starts, "no successor started while the zombie was frozen"
        return
    raise AssertionError("no zombies seed stalled a boot")


def test_only_a_resumed_zombie_is_killed_and_its_successor_serves_on() -> None:
    """FaultKind.ZOMBIE_KILL (zombies): it fires only in a boot whose stall has ended,
    and what that boot settled is left to the successor's relays, which pay its
    evidence (the seed holds: terminal_evidence_once)."""
    for seed in range(1, 30):
        result = run_simulation(seed, "zombies", "swarm")
        assert result.ok, (seed, result.invariant, result.error)
        kills = [e for e in _events(result.trace_lines, "boot.crash")
                 if str(e["data"]["reason"]).startswith("zombie killed")]  # type: ignore[index]
        if not kills:
            continue
        stalls = _events(result.trace_lines, "boot.stall")
        for kill in kills:
            boot = kill["data"]["boot"]  # type: ignore[index]
            ended = [s["t"] + s["data"]["seconds"] for s in stalls  # type: ignore[operator,index]
                     if s["data"]["boot"] == boot]  # type: ignore[index]
            assert ended and min(ended) <= kill["t"], (seed, kill)  # type: ignore[operator]
            began = min(s["t"] for s in stalls if s["data"]["boot"] == boot)  # type: ignore[index,type-var]
            successors = [e for e in _events(result.trace_lines, "boot.start")
                          if began <= e["t"] <= kill["t"]]  # type: ignore[operator]
            assert successors, (seed, "killed with no successor serving")
        replay = run_simulation(seed, "zombies", "swarm", result.fired)
        assert replay.fired.faults == result.fired.faults  # a kill replays from its plan
        assert [f for f in replay.fired.faults if f.fault is FaultKind.ZOMBIE_KILL]
        return
    raise AssertionError("no zombies seed killed a resumed zombie")


def test_a_slow_reconciliation_outlasts_the_lease_and_the_boot_renews_before_it_claims() -> None:
    """FaultKind.SLOW_RECONCILE holds a live, reachable boot in its startup for longer
    than its lease (no stall, no partition). The runtime renews before serving, so its
    claims are on a live lease; a startup that serves on the registration lease is
    caught at its first claim (boots.renewed_before_serving)."""
    plan = FaultPlan(faults=[PlannedFault(
        trigger=AtPoint(point="reconcile.started", nth=1), fault=FaultKind.SLOW_RECONCILE,
        amount=30.0)])
    result = run_simulation(1, "two_vessels", "calm", plan)
    assert result.ok, (result.invariant, result.error)
    assert [f.fault for f in result.fired.faults] == [FaultKind.SLOW_RECONCILE]
    assert not _events(result.trace_lines, "boot.stall")
    assert not _events(result.trace_lines, "boot.partition")
    done = [e["t"] for e in _events(result.trace_lines, "startup.done")]
    assert len(done) == 2 and max(done) >= 30.0  # type: ignore[type-var,operator]
    broken = run_simulation(1, "two_vessels", "calm", plan, break_name="lease_stale_at_ready")
    assert broken.invariant == "claims_on_a_renewed_lease", (broken.invariant, broken.error)
