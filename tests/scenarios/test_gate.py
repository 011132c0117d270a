"""The release gate: ship on a healthy build, refuse a broken one with the
invariant and replay command in its Markdown, exit 2 on a bad policy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

POLICY = """
[gate]
budget_s = 900
min_fires_per_point = 0
determinism_audit_fraction = 0.05

[[gate.campaign]]
scenarios = "basic"
profile = "swarm"
seeds = "1-30"
"""


def _gate(tmp_path: Path, policy: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "gate.toml"
    path.write_text(policy)
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "gate", "--policy", str(path), "--out",
         str(tmp_path / "out")],
        capture_output=True, text=True, timeout=900, env={**os.environ, **env},
    )


def test_gate_ships_a_healthy_build_and_writes_every_report(tmp_path: Path) -> None:
    done = _gate(tmp_path, POLICY)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in ("gate.xml", "gate.json", "gate.md"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert "SHIP" in (tmp_path / "out" / "gate.md").read_text()


def test_gate_refuses_a_broken_fence_naming_invariant_and_replay(tmp_path: Path) -> None:
    done = _gate(tmp_path, POLICY, SIM_BREAK="claim_fence")
    assert done.returncode == 1
    markdown = (tmp_path / "out" / "gate.md").read_text()
    assert "DO NOT SHIP" in markdown
    assert "claim_is_exact" in markdown
    assert "SIM_BREAK=claim_fence harness replay --seed" in markdown
    assert "<failure" in (tmp_path / "out" / "gate.xml").read_text()


def test_gate_policy_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    bad = POLICY.replace('profile = "swarm"', 'profile = "wild"')
    done = _gate(tmp_path, bad)
    assert done.returncode == 2
    assert done.stderr.startswith("error:") and "profile" in done.stderr
    assert done.stderr.strip().count("\n") == 0
    missing = subprocess.run([sys.executable, "-m", "harness.cli", "gate", "--policy",
                              str(tmp_path / "nope.toml")], capture_output=True, text=True)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_catalogue_is_consistent_both_ways() -> None:
    from harness.catalogue_check import check

    report = check()
    assert report.missing == [] and report.unused == []


def test_the_sweep_adds_a_breaks_known_seed_beyond_its_window() -> None:
    from harness.rules_report import _sweep_seeds

    assert _sweep_seeds([1, 2, 3], 1654) == [1, 2, 3, 1654]
    assert _sweep_seeds([1, 2, 3], 2) == [1, 2, 3]


def test_gate_sweeps_breaks_reports_seeds_to_detection_and_refuses_a_survivor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue M9: a break that no seed of the sweep catches blocks shipping."""
    from harness import rules_report
    from harness.gate import CampaignSpec, Policy, run_gate
    from harness.report import gate_json, gate_markdown

    # The window alone: late_job_left_queued's known catching seed (12) would catch it.
    monkeypatch.setattr(rules_report, "_sweep_seeds", lambda window, known: window)

    policy = Policy(
        min_fires_per_point=0, determinism_audit_fraction=0.0, require_rules=True,
        break_sweep=True, break_only=["doctrine_priority", "late_job_left_queued"],
        break_max_seeds=1, campaign=[CampaignSpec(scenarios="basic", profile="calm", seeds="1")],
    )
    result = run_gate(policy, 1, lambda *a: "replay")
    breaks = {c.name: c for c in result.checks if c.suite == "breaks"}
    caught = breaks["doctrine_priority (claim.priority_mapping)"]
    assert caught.ok and "caught at seed 1" in caught.detail
    assert caught.replay == ("SIM_BREAK=doctrine_priority harness replay --seed 1 "
                             "--scenario basic --profile swarm")
    survivor = breaks["late_job_left_queued (cancel.late_job_fenced)"]
    assert not survivor.ok and "survived 1 seeds" in survivor.detail
    assert not result.ship
    assert all(c.ok for c in result.checks if c.suite == "rules")
    sweep = gate_json(result)["break_sweep"]
    assert sweep["survivors"] == ["late_job_left_queued"]
    assert sweep["median_seeds_to_detection"] == 1
    assert "| doctrine_priority | claim.priority_mapping | basic | 1 | 1 |" in \
        gate_markdown(result)
