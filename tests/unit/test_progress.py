"""Campaign progress off a terminal and the campaign report's verdict fields
(issue M15): periodic plain lines with done/total, scenario, violations and
ETA; one final verdict line; `seeds` (distinct) vs `simulations`."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from harness import report
from harness.progress import Progress, duration
from sim.campaign import CampaignReport


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _result(seed: int, scenario: str, ok: bool = True) -> dict[str, Any]:
    return {"seed": seed, "scenario": scenario, "profile": "swarm",
            "verdict": "ok" if ok else "violation", "invariant": None if ok else "fenced",
            "message": "" if ok else "two owners", "records": {}, "trace_hash": "h",
            "coverage": {"hits": {"claim.committed": 2}, "fires": {"claim.committed": 1},
                         "kinds": {"crash": 1}},
            "runs": 3, "boots": 1, "virtual_s": 10.0, "wall_s": 0.5, "fired": 1,
            "replay": f"harness replay --seed {seed} --scenario {scenario} --profile swarm"}


def test_off_a_terminal_a_line_every_interval_with_counts_and_eta() -> None:
    buf = io.StringIO()
    clock = FakeClock()
    with Progress(Console(file=buf), 10, clock=clock) as progress:
        progress.expect(4)
        progress.tick(_result(1, "basic"))
        assert buf.getvalue() == ""  # nothing before the interval
        clock.now += 10
        progress.tick(_result(2, "cancel", ok=False))
        clock.now += 3
        progress.tick(_result(3, "cancel"))
        clock.now += 7
        progress.tick(_result(4, "cancel"))
    lines = buf.getvalue().splitlines()
    assert lines == [
        "campaign progress: 2/4 simulations (50%), scenario cancel, 1 violations, 10s elapsed, "
        "ETA 10s",
        "campaign done: 4/4 simulations (100%), 1 violations, 20s elapsed",
    ]


def test_zero_interval_prints_nothing() -> None:
    buf = io.StringIO()
    clock = FakeClock()
    with Progress(Console(file=buf), 0, clock=clock) as progress:
        progress.expect(2)
        for seed in (1, 2):
            clock.now += 60
            progress.tick(_result(seed, "basic"))
        progress.say("phase")
    assert buf.getvalue() == ""


def test_durations_read_as_minutes_and_hours() -> None:
    assert (duration(5), duration(75), duration(3725)) == ("5s", "1m15s", "1h02m05s")


def test_the_report_counts_simulations_apart_from_seeds_and_carries_a_verdict() -> None:
    rep = CampaignReport(results=[_result(s, n) for n in ("basic", "cancel") for s in (1, 2, 3)])
    doc = report.campaign_json(rep, ["basic", "cancel"], "swarm")
    assert doc["schema_version"] == report.SCHEMA_VERSION
    assert (doc["seeds"], doc["simulations"]) == (3, 6)
    assert doc["by_scenario"]["cancel"] == {"simulations": 3, "seeds": 3, "runs_simulated": 9,
                                            "violations": 0, "virtual_s": 30.0}
    assert doc["verdict"] == "pass"
    assert report.verdict_line(doc).startswith("verdict: PASS 6 simulations (2 scenarios x 3 seeds")
    assert doc["results"][0]["fires"] == {"claim.committed": 1}
    page = report.campaign_html({**doc, "wall_s": 1.0})
    assert "6 simulations (2 scenarios x 3 seeds)" in page


def test_a_violation_or_a_required_gap_fails_the_verdict() -> None:
    bad = CampaignReport(results=[_result(1, "basic"), _result(2, "basic", ok=False)])
    doc = report.campaign_json(bad, ["basic"], "swarm")
    assert doc["verdict"] == "fail" and doc["by_scenario"]["basic"]["violations"] == 1
    assert report.verdict_line(doc).startswith("verdict: FAIL 2 simulations")
    clean = CampaignReport(results=[_result(1, "basic")])
    assert clean.gaps()  # one point fired: the catalogue has more
    assert report.campaign_json(clean, ["basic"], "swarm")["verdict"] == "pass"
    required = report.campaign_json(clean, ["basic"], "swarm", require_coverage=True)
    assert required["verdict"] == "fail"
    assert "coverage gaps (required)" in report.verdict_line(required)


def test_point_names_fold_instead_of_being_cut_at_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness import cli

    long_point = "ledger.a_very_long_seam_name_that_does_not_fit_in_one_narrow_column_at_all"
    result = _result(1, "basic")
    result["coverage"] = {"hits": {long_point: 3}, "fires": {long_point: 2},
                          "kinds": {"a_very_long_fault_kind_name_for_the_kinds_table_x": 1}}
    buf = io.StringIO()
    monkeypatch.setattr(cli, "out", Console(file=buf, width=80))
    cli._print_summary(CampaignReport(results=[result], wall_s=1.0), "swarm")
    text = buf.getvalue()
    assert "…" not in text
    cells = "".join(line.split("│")[1].strip() for line in text.splitlines()
                    if line.count("│") == 4)
    assert long_point in cells
