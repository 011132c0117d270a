"""`harness gate --reuse`: the gate takes a campaign report's simulations
instead of running them again, only when the report is from this code and
the same SIM_BREAK, and the result is the one it would have computed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import sim.campaign
from harness import gate, reuse
from harness.cli import main, replay_command


def _policy(seeds: str = "1-3") -> gate.Policy:
    return gate.Policy.model_validate({
        "min_fires_per_point": 0, "determinism_audit_fraction": 0.0,
        "campaign": [{"scenarios": "basic", "profile": "default", "seeds": seeds}],
    })


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("reports") / "basic.json"
    with pytest.raises(SystemExit) as info:
        main(["campaign", "--scenario", "basic", "--seeds", "1-3", "--json", str(path)])
    assert info.value.code == 0
    return path


def _campaign_checks(result: gate.GateResult) -> list[tuple[str, bool]]:
    return [(c.name, c.ok) for c in result.checks if c.suite == "campaigns"]


def test_the_gate_reuses_a_report_of_this_code_instead_of_simulating(
    report: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = gate.run_gate(_policy(), 1, replay_command)
    ran: list[Any] = []
    real = sim.campaign.run_one

    def counting(job: Any) -> dict[str, Any]:
        ran.append(job)
        return real(job)

    monkeypatch.setattr(sim.campaign, "run_one", counting)
    loaded = reuse.load([report.parent], None)
    assert loaded.used == [str(report)] and not loaded.skipped
    reused = gate.run_gate(_policy("1-4"), 1, replay_command, reuse=loaded)
    assert [job[0] for job in ran] == [4]  # only the seed the report lacks
    check = next(c for c in reused.checks if c.suite == "campaigns")
    assert check.ok and "4 seeds" in check.detail and "3 reused" in check.detail
    assert _campaign_checks(fresh)[0][1]
    fires_fresh = {p: n for p, n in fresh.coverage.items() if n}
    ran.clear()
    again = gate.run_gate(_policy(), 1, replay_command, reuse=loaded)
    assert ran == []
    assert {p: n for p, n in again.coverage.items() if n} == fires_fresh


def test_a_report_from_other_code_or_another_break_is_not_reused(
    report: Path, tmp_path: Path
) -> None:
    doc = json.loads(report.read_text())
    (tmp_path / "other.json").write_text(json.dumps({**doc, "code_digest": "x" * 64}))
    (tmp_path / "broken.json").write_text(json.dumps({**doc, "break": "claim_fence"}))
    (tmp_path / "old.json").write_text(json.dumps({**doc, "schema_version": 1}))
    loaded = reuse.load([tmp_path], None)
    assert loaded.results == {} and len(loaded.skipped) == 3
    reasons = " ".join(loaded.skipped)
    assert "other code" in reasons and "SIM_BREAK=claim_fence" in reasons and "schema" in reasons
    assert reuse.load([report], "claim_fence").results == {}


def test_gate_reuse_of_a_missing_path_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = Path(__file__).resolve().parents[2] / "ci" / "gate.toml"
    with pytest.raises(SystemExit) as info:
        main(["gate", "--policy", str(policy), "--out", str(tmp_path / "g"),
              "--reuse", str(tmp_path / "nope")])
    assert info.value.code == 2
    assert "--reuse" in capsys.readouterr().err


def _receipts_policy() -> gate.Policy:
    return gate.Policy.model_validate({
        "require_receipts": True, "require_leased": True,
        "campaign": [{"scenarios": "basic", "profile": "default", "seeds": "1"}],
    })


def _write_receipts(root: Path, names: list[str], digest: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / f"{name}.json").write_text(json.dumps(
            {"window": name, "verdict": "proved", "code_digest": digest}))


def test_reused_receipts_are_checked_not_proved_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.catalogue_check import code_digest
    from harness.receipts.leased_checks import LEASED_CHECKS
    from harness.receipts.vessels import VESSEL_CHECKS

    def no_proving(*args: object) -> None:
        raise AssertionError("receipts proved again although reused")

    monkeypatch.setattr(gate, "_prove_receipts", no_proving)
    digest = code_digest()
    everything = [*reuse.reachable_windows(), *LEASED_CHECKS, *VESSEL_CHECKS]
    _write_receipts(tmp_path / "all", everything, digest)
    result = gate.GateResult(digest=digest)
    gate._receipts(_receipts_policy(), tmp_path / "all", result, prove=False)
    checked = [c for c in result.checks
               if c.suite in ("receipts", "leased receipts", "vessel receipts")]
    assert len(checked) == len(everything) and all(c.ok for c in checked)

    # A reachable window without its receipt is missing, not skipped; stale code fails.
    short = reuse.reachable_windows()[1:]
    _write_receipts(tmp_path / "short", [*short, *LEASED_CHECKS], digest)
    result = gate.GateResult(digest=digest)
    gate._receipts(_receipts_policy(), tmp_path / "short", result, prove=False)
    failed = [(c.suite, c.name) for c in result.checks if not c.ok]
    assert failed == [("receipts", reuse.reachable_windows()[0]),
                      *(("vessel receipts", name) for name in VESSEL_CHECKS)]
    _write_receipts(tmp_path / "stale", everything, "0" * 64)
    result = gate.GateResult(digest=digest)
    gate._receipts(_receipts_policy(), tmp_path / "stale", result, prove=False)
    assert not any(c.ok for c in result.checks)
