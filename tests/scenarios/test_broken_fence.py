"""Proof that the checker can fail: with the claim fence broken (test-only,
sim.breaks), the campaign exits 1, its printed replay reproduces the same
violation, and shrink returns a smaller plan that still fails."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sim.kernel import run_simulation
from sim.shrink import shrink

HARNESS = [sys.executable, "-m", "harness.cli"]


def _harness(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HARNESS, *args], env={**os.environ, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_campaign_catches_the_broken_fence_and_replay_reproduces_it(tmp_path: Path) -> None:
    env = {"SIM_BREAK": "claim_fence"}
    report = tmp_path / "report.json"
    done = _harness("campaign", "--scenario", "basic", "--seeds", "1-40", "--jobs", "2",
                    "--json", str(report), env=env, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    violations = json.loads(report.read_text())["violations"]
    assert violations
    first = violations[0]
    command = shlex.split(first["replay"])
    assert command[0] == "SIM_BREAK=claim_fence"
    replay = _harness(*command[2:], env=env, cwd=tmp_path)
    assert replay.returncode == 1
    assert f"[{first['invariant']}]" in replay.stdout


def test_without_the_break_the_same_seeds_hold(tmp_path: Path) -> None:
    done = _harness("campaign", "--scenario", "basic", "--seeds", "1-20", env={}, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_shrink_finds_a_smaller_plan_that_still_fails() -> None:
    seed = next(
        s for s in range(1, 200)
        if (r := run_simulation(s, "basic", "swarm", break_name="claim_fence")).invariant
        and len(r.fired.faults) >= 3
    )
    result = shrink(seed, "basic", "swarm", break_name="claim_fence")
    assert result is not None
    assert len(result.plan.faults) < len(result.original.fired.faults)
    again = run_simulation(seed, "basic", "swarm", result.plan, break_name="claim_fence")
    assert again.invariant == result.original.invariant


@pytest.mark.parametrize("args", [["replay", "--seed", "x"], ["campaign", "--seeds", "9-1"],
                                  ["campaign", "--scenario", "nope"],
                                  ["replay", "--seed", "1", "--profile", "wild"]])
def test_usage_errors_exit_2_with_one_line(args: list[str], tmp_path: Path) -> None:
    done = _harness(*args, env={}, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith("error:")
    assert "Traceback" not in done.stderr
