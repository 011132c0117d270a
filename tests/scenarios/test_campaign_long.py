"""The long campaign, run in its own CI step (`pytest -m campaign`).

With `HARNESS_CAMPAIGN_REPORTS=DIR` (set by `.ci/run`) each campaign keeps its
JSON report there, and `harness gate --reuse DIR` takes those simulations
instead of running them again. The campaigns' progress lines go to the
step's log (stderr is not captured; `pytest -s`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import faults

pytestmark = [pytest.mark.campaign, pytest.mark.timeout(2700)]

BASIC_SLICE = (
    faults.ADMIT_COMMITTED, faults.RELEASE_COMMITTED, faults.PUBLISH_SENT_BEFORE_ACK,
    faults.CLAIM_COMMITTED, faults.EFFECT_APPLIED, faults.SETTLE_TERMINAL_COMMITTED,
    faults.SETTLE_EVIDENCE_WRITTEN, faults.RECONCILE_STARTED,
)
"""The catalogued points the admission -> claim -> settle slice passes through."""


def _report_path(tmp_path: Path, name: str) -> Path:
    folder = os.environ.get("HARNESS_CAMPAIGN_REPORTS")
    return Path(folder) / name if folder else tmp_path / name


def test_basic_campaign_500_seeds_holds_and_covers_every_kind(tmp_path: Path) -> None:
    report = _report_path(tmp_path, "basic-default-1-500.json")
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "campaign", "--scenario", "basic",
         "--seeds", "1-500", "--jobs", "2", "--json", str(report)],
        stdout=subprocess.PIPE, text=True, timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    doc = json.loads(report.read_text())
    assert doc["violations"] == []
    kinds = doc["coverage"]["kinds"]
    for kind in ("crash", "publish_fail", "ack_lost", "duplicate_delivery", "delayed_delivery",
                 "ledger_transient", "ledger_ambiguous", "ledger_latency"):
        assert kinds.get(kind, 0) > 0, kind
    points = doc["coverage"]["points"]
    for point in BASIC_SLICE:
        assert points.get(point, {}).get("hits", 0) > 0, point


def test_all_scenarios_swarm_campaign_fires_every_catalogued_point(tmp_path: Path) -> None:
    report = _report_path(tmp_path, "all-swarm-1-300.json")
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "campaign", "--scenario", "all", "--profile",
         "swarm", "--seeds", "1-300", "--jobs", "2", "--require-coverage", "--json", str(report)],
        stdout=subprocess.PIPE, text=True, timeout=2400,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    doc = json.loads(report.read_text())
    assert doc["violations"] == []
    assert doc["coverage_gaps"] == []
