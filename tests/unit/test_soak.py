"""The soak's oracle and options: each way of betraying a caller is counted and fails it.

The soak itself drives real processes (tests/restart/test_soak.py); here its
tally is fed hand-made ledgers, so each verdict is shown to be able to fail.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from harness.soak.chaos import Fault, pg_restart_marks
from harness.soak.clients import Admission
from harness.soak.options import SoakOptions, SoakUsageError, Toxic
from harness.soak.tally import tally
from harness.soak.workload import RunPlan, plans

LIVE, DEAD = "boot-live", "boot-dead"


def _run(run_id: str, key: str, status: str = "DONE", error: str | None = None) -> Any:
    intent = SimpleNamespace(source="api", sigil="soak", idempotency_key=key)
    return SimpleNamespace(id=run_id, intent=intent, status=SimpleNamespace(value=status),
                           error=error, pattern="echo")


def _delivery(run_id: str, boot: str, seq: int = 0) -> Any:
    return SimpleNamespace(run_id=run_id, seq=seq, claimed_boot=boot)


def _step(run_id: str, kind: str) -> Any:
    return SimpleNamespace(run_id=run_id, kind=kind)


def _admitted(key: str, run_id: str, replay_id: str | None = None) -> Admission:
    plan = RunPlan(key=key, pattern="echo", content={}, cancel=False, replay=bool(replay_id))
    return Admission(plan, run_id=run_id, replay_id=replay_id)


def _tally(admissions: list[Admission], runs: list[Any], deliveries: Sequence[Any] = (),
           steps: Sequence[Any] = (), faults: Sequence[Fault] = (),
           invariants: Sequence[dict[str, Any]] = ()) -> Any:
    dump: Any = SimpleNamespace(runs=runs, deliveries=list(deliveries), steps=list(steps))
    return tally(admissions, [], list(faults), dump, list(invariants), {DEAD})


def test_a_clean_ledger_passes() -> None:
    outcome = _tally([_admitted("k1", "r1")], [_run("r1", "k1")],
                     steps=[_step("r1", "run.done")])
    assert outcome.passed and outcome.counts["done"] == 1


def test_an_acknowledged_run_missing_from_the_ledger_is_lost() -> None:
    outcome = _tally([_admitted("k1", "r1")], [])
    assert outcome.counts["lost"] == 1 and not outcome.passed


def test_a_replay_answered_with_another_run_is_a_duplicate() -> None:
    outcome = _tally([_admitted("k1", "r1", replay_id="r2")], [_run("r1", "k1")])
    assert outcome.counts["duplicated"] == 1 and not outcome.passed


def test_two_runs_for_one_key_are_a_duplicate() -> None:
    outcome = _tally([_admitted("k1", "r1")], [_run("r1", "k1"), _run("r2", "k1")])
    assert outcome.counts["duplicated"] == 1 and not outcome.passed


def test_two_terminal_steps_for_one_run_are_a_duplicate() -> None:
    outcome = _tally([_admitted("k1", "r1")], [_run("r1", "k1")],
                     steps=[_step("r1", "run.done"), _step("r1", "run.done")])
    assert outcome.counts["duplicated"] == 1 and not outcome.passed


def test_an_open_run_at_the_end_is_stuck() -> None:
    outcome = _tally([_admitted("k1", "r1")], [_run("r1", "k1", status="RUNNING")])
    assert outcome.counts["stuck"] == 1 and not outcome.passed


def test_lost_with_a_killed_boot_is_allowed_but_with_a_live_boot_it_fails() -> None:
    lost = "lost: the process died during an uncheckpointed hop"
    dead = _tally([_admitted("k1", "r1")], [_run("r1", "k1", "FAILED", lost)],
                  deliveries=[_delivery("r1", DEAD)])
    assert dead.passed and dead.counts["failed_as_lost"] == 1
    live = _tally([_admitted("k1", "r1")], [_run("r1", "k1", "FAILED", lost)],
                  deliveries=[_delivery("r1", LIVE)])
    assert live.counts["failed_live"] == 1 and not live.passed


def test_any_other_failure_fails_the_soak() -> None:
    outcome = _tally([_admitted("k1", "r1")], [_run("r1", "k1", "FAILED", "pool closed")])
    assert outcome.counts["failed_other"] == 1 and not outcome.passed


def test_a_fault_without_recovery_fails_and_recovery_times_are_reported() -> None:
    faults = [Fault("kill", "SIGKILL v1", 1.0, recovered_s=2.0),
              Fault("kill", "SIGKILL v1", 9.0, recovered_s=4.0),
              Fault("pg_restart", "fast", 5.0, note="no probe completed")]
    outcome = _tally([], [], faults=faults)
    assert outcome.recovery["kill"]["p50_s"] == 3.0 and outcome.recovery["kill"]["max_s"] == 4.0
    assert outcome.counts["unrecovered"] == 1 and not outcome.passed


def test_a_broken_invariant_fails_the_soak() -> None:
    outcome = _tally([], [], invariants=[{"invariant": "x", "held": False, "message": "m"}])
    assert outcome.counts["invariants"] == 1 and not outcome.passed


def test_the_workload_is_fixed_by_its_seed() -> None:
    assert plans(50, 3) == plans(50, 3) != plans(50, 4)
    assert {p.pattern for p in plans(200, 1)} >= {"echo", "two_step", "consent_gate", "chatty"}


def test_restart_marks_fall_inside_the_traffic() -> None:
    assert pg_restart_marks(1000, 2) == [333, 666]
    assert pg_restart_marks(3, 5) == [1, 1, 1, 2, 2]


@pytest.mark.parametrize(("spec", "kind", "attributes"), [
    ("latency", "latency", {}),
    ("latency:latency=20,jitter=5", "latency", {"latency": 20, "jitter": 5}),
])
def test_toxic_specs_parse(spec: str, kind: str, attributes: dict[str, int]) -> None:
    assert Toxic.parse(spec) == Toxic(kind, attributes)


@pytest.mark.parametrize("bad", [
    {"vessels": 0}, {"runs": 0}, {"kill_every_s": -1}, {"pg_restarts": 1, "dsn": "x"},
])
def test_bad_options_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(SoakUsageError):
        SoakOptions(**bad)


@pytest.mark.parametrize("argv", [
    ["--vessels", "0"], ["--toxics", "bogus"], ["--toxics", "latency:latency=x"],
    ["--pg-restarts", "1", "--dsn", "postgresql://x"],
])
def test_bad_soak_options_exit_2_with_one_line(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "harness.cli", "soak", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
