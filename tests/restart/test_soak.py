"""`harness soak` against real `vessel serve` processes: kills and a PostgreSQL restart.

Short soaks (the CI step runs a longer one): every admitted Run must be
kept, reach a terminal state exactly once, and the system must serve again
after each fault.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.soak import SoakOptions, run_soak

pytestmark = [pytest.mark.restart, pytest.mark.soak]


def _assert_clean(outcome: object, out: Path) -> dict[str, object]:
    report = json.loads((out / "soak.json").read_text())
    counts = report["counts"]
    bad = {k: counts[k] for k in ("lost", "duplicated", "stuck", "failed_live",
                                  "failed_other", "invariants", "unrecovered") if counts[k]}
    assert not bad, json.dumps({"bad": bad, "examples": report["examples"]}, indent=2)
    assert counts["admitted"] == report["options"]["runs"]
    return report


def test_a_vessel_killed_under_load_loses_nothing(pg_dsn: str, tmp_path: Path) -> None:
    outcome = run_soak(SoakOptions(runs=40, kill_every_s=3, dsn=pg_dsn, out_dir=tmp_path),
                       say=lambda _: None)
    report = _assert_clean(outcome, tmp_path)
    kills = [f for f in report["faults"] if f["kind"] == "kill"]  # type: ignore[union-attr]
    assert kills and all(f["recovered_s"] is not None for f in kills)
    assert report["recovery"]["kill"]["p50_s"] is not None  # type: ignore[index]


def test_a_postgresql_restart_under_load_loses_nothing(tmp_path: Path) -> None:
    outcome = run_soak(SoakOptions(runs=30, pg_restarts=1, out_dir=tmp_path),
                       say=lambda _: None)
    report = _assert_clean(outcome, tmp_path)
    restarts = [f for f in report["faults"] if f["kind"] == "pg_restart"]  # type: ignore[union-attr]
    assert len(restarts) == 1 and restarts[0]["recovered_s"] is not None
