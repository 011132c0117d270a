"""Scenario `basic` over a fixed seed set, and the simulator's own promises:
determinism, fault visibility, and a checker that can fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings

from harness.strategies import fault_plans
from sim.faults.plan import FaultKind, FaultPlan
from sim.kernel import SimResult, run_simulation
from sim.trace import Trace

FIXED_SEEDS = range(1, 41)


@pytest.mark.parametrize("profile", ["calm", "default", "swarm"])
def test_basic_holds_every_invariant_over_fixed_seeds(profile: str) -> None:
    failures = [
        (r.seed, r.invariant, r.error)
        for r in (run_simulation(s, "basic", profile) for s in FIXED_SEEDS)
        if not r.ok
    ]
    assert failures == []


def test_same_seed_same_trace_within_a_process() -> None:
    a = run_simulation(42, "basic", "swarm")
    run_simulation(7, "basic", "swarm")  # other seeds in between change nothing
    b = run_simulation(42, "basic", "swarm")
    assert a.trace_hash == b.trace_hash
    assert a.trace_lines == b.trace_lines


def test_different_seeds_give_different_traces() -> None:
    hashes = {run_simulation(s, "basic", "default").trace_hash for s in (1, 2, 3)}
    assert len(hashes) == 3


def test_same_seed_same_trace_across_processes_and_hash_seeds() -> None:
    code = (
        "from sim.kernel import run_simulation;"
        "print(run_simulation(42, 'basic', 'default').trace_hash)"
    )
    hashes = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                              capture_output=True, text=True)
        hashes.add(done.stdout.strip())
    assert hashes == {run_simulation(42, "basic", "default").trace_hash}


def test_a_violation_carrying_an_object_repr_replays_byte_identically() -> None:
    # This break fails a Run with an error string that holds trio's Cancelled repr,
    # whose task address differs per process: the trace must not record it.
    code = (
        "from sim.breaks import broken; from sim.kernel import run_simulation\n"
        "with broken('racing_admission_as_creator'):\n"
        "    r = run_simulation(3, 'admission_race', 'swarm')\n"
        "print(r.invariant, r.trace_hash)"
    )
    outs = {subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                           text=True).stdout.strip() for _ in range(2)}
    assert len(outs) == 1
    assert outs.pop().startswith("failure_has_cause ")


def test_trace_lines_hold_no_object_address() -> None:
    async def emit() -> Trace:
        trace = Trace()
        trace.emit("hop", "failed", error="Cancelled(<Task 'x' at 0x7f9953a79c70>)")
        return trace

    line = trio.run(emit).lines[0]
    assert "0x7f" not in line and " at 0x?" in line


def test_a_process_wide_freeze_gives_the_same_traces_and_a_real_wall_clock() -> None:
    # Campaign workers keep freezegun started (sim.clock.freeze_process), so each
    # simulation's freeze is nested; that must not change a trace. In a subprocess:
    # the freeze is never undone.
    code = (
        "from sim.clock import freeze_process; from sim.kernel import run_simulation\n"
        "for s in ('basic', 'restart_storm'):\n"
        "    a = run_simulation(3, s, 'swarm').trace_hash\n"
        "    freeze_process()\n"
        "    b = run_simulation(3, s, 'swarm')\n"
        "    print(a == b.trace_hash, b.wall_s > 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True)
    assert done.stdout.split() == ["True", "True", "True", "True"]


def _fired(result: SimResult) -> list[dict[str, object]]:
    return [json.loads(line)["data"] for line in result.trace_lines
            if '"event":"fault.fired"' in line]


def test_every_fired_fault_is_visible_in_the_trace() -> None:
    result = run_simulation(11, "basic", "swarm")
    traced = _fired(result)
    assert len(traced) == len([f for f in result.fired.faults if f.trigger.kind == "point"])
    assert [d["fault"] for d in traced] == [
        f.fault.value for f in result.fired.faults if f.trigger.kind == "point"
    ]


def test_a_recorded_plan_replays_the_same_faults() -> None:
    profile_run = run_simulation(5, "basic", "swarm")
    plan_run = run_simulation(5, "basic", "swarm", profile_run.fired)
    assert plan_run.fired.faults == profile_run.fired.faults
    assert plan_run.ok == profile_run.ok


def test_a_crash_really_kills_the_boot_and_a_new_boot_recovers() -> None:
    plan = FaultPlan.model_validate(
        {"faults": [{"trigger": {"kind": "point", "point": "claim.committed", "nth": 1},
                     "fault": "crash"}]}
    )
    result = run_simulation(3, "basic", "calm", plan)
    assert result.ok, result.error
    assert result.boots >= 2
    events = [json.loads(line) for line in result.trace_lines]
    crash = next(e for e in events if e["event"] == "boot.crash")
    assert crash["data"]["reason"] == "crash at claim.committed"
    started = [e for e in events if e["event"] == "startup.done"]
    assert started[1]["data"]["failed_orphans"] == 1  # the claimed Run failed as lost


def test_ledger_faults_change_what_the_runtime_sees() -> None:
    plan = FaultPlan.model_validate(
        {"faults": [{"trigger": {"kind": "point", "point": "ledger.claim_delivery", "nth": 1},
                     "fault": FaultKind.LEDGER_AMBIGUOUS.value}]}
    )
    calm = run_simulation(3, "basic", "calm")
    faulted = run_simulation(3, "basic", "calm", plan)
    assert faulted.ok
    assert faulted.trace_hash != calm.trace_hash
    assert faulted.coverage["kinds"] == {"ledger_ambiguous": 1}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=fault_plans())
def test_random_fault_plans_never_break_an_invariant(plan: FaultPlan) -> None:
    result = run_simulation(9, "basic", "calm", plan)
    assert result.ok, (result.invariant, result.error, plan.model_dump_json())


def test_fault_plan_json_round_trip(tmp_path: Path) -> None:
    result = run_simulation(13, "basic", "swarm")
    path = tmp_path / "plan.json"
    result.fired.save(path)
    assert FaultPlan.load(path) == result.fired
