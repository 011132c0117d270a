"""The receipts index, selection, exit code and gate rule for leased-job receipts.

No processes or database: receipts are written by hand (or by a stand-in for
`run_check`), then `write_index`, `choose`, `harness receipts` and the gate's
leased rule are held to what issue 8 asks: the leased checks are listed in
their own section, proved/failed/stale/missing by the same code-digest rule
as the windows, a leased receipt may prove a catalogued window, a failed
leased receipt makes `harness receipts` exit 1 and blocks the gate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness import gate
from harness.catalogue_check import code_digest
from harness.receipts import index as index_module
from harness.receipts.index import LEASED_TITLE, write_index
from harness.receipts.leased_checks import LEASED_CHECKS, LeasedCheck
from harness.receipts.selection import choose
from harness.receipts.vessels import KIND, VESSEL_CHECKS
from harness.receipts.windows import WINDOWS

LATE = "leased.late_result_fenced_out"


def receipt(out: Path, name: str, verdict: str, digest: str | None = None,
            **extra: Any) -> None:
    doc = {"window": name, "verdict": verdict, "code_digest": digest or code_digest(),
           "problems": [] if verdict == "proved" else ["it broke"], "processes": [{"pid": 7}],
           "seconds": 1.5, **extra}
    (out / f"{name}.json").write_text(json.dumps(doc))


def test_the_index_lists_every_leased_check_in_its_own_section(tmp_path: Path) -> None:
    names = list(LEASED_CHECKS)
    receipt(tmp_path, names[0], "proved")
    receipt(tmp_path, names[1], "proved", digest="0" * 64)
    receipt(tmp_path, names[2], "failed")
    index = write_index(tmp_path)

    verdicts = {e["check"]: e["verdict"] for e in index["leased"]}
    assert list(verdicts) == names
    assert verdicts[names[0]] == "proved"
    assert verdicts[names[1]] == "stale"  # proved on other code
    assert verdicts[names[2]] == "failed"
    assert all(verdicts[n] == "missing" for n in names[3:])
    failed = next(e for e in index["leased"] if e["check"] == names[2])
    assert failed["reason"] == "it broke" and failed["pids"] == [7]
    assert {e["window"] for e in index["windows"]} == set(index_module.CATALOGUE)

    on_disk = json.loads((tmp_path / "index.json").read_text())
    assert on_disk["leased"] == index["leased"]
    assert LEASED_TITLE == "leased jobs (seed 004)"
    md = (tmp_path / "index.md").read_text()
    assert "## Leased jobs (seed 004)" in md and f"| {names[2]} | failed |" in md
    page = (tmp_path / "index.html").read_text()
    assert "Leased jobs (seed 004)" in page and names[0] in page


def test_a_leased_receipt_proves_the_catalogued_window_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert LEASED_CHECKS[LATE].proves == "job.inference_returned"
    catalogue = dict(index_module.CATALOGUE)
    catalogue.setdefault("job.inference_returned", None)  # type: ignore[arg-type]
    monkeypatch.setattr(index_module, "CATALOGUE", catalogue)

    assert _window(write_index(tmp_path), "job.inference_returned")["verdict"] == "missing"
    receipt(tmp_path, LATE, "proved", proves="job.inference_returned")
    entry = _window(write_index(tmp_path), "job.inference_returned")
    assert entry["verdict"] == "proved" and entry["proved_by"] == LATE
    assert f"by {LATE}" in (tmp_path / "index.md").read_text()

    receipt(tmp_path, LATE, "proved", digest="1" * 64, proves="job.inference_returned")
    assert _window(write_index(tmp_path), "job.inference_returned")["verdict"] == "stale"
    receipt(tmp_path, LATE, "failed", proves="job.inference_returned")
    assert _window(write_index(tmp_path), "job.inference_returned")["verdict"] == "failed"


def _window(index: dict[str, Any], point: str) -> dict[str, Any]:
    return next(w for w in index["windows"] if w["window"] == point)


def test_choose_takes_windows_leased_checks_and_the_windows_they_prove() -> None:
    windows, checks = choose([])
    assert windows == list(WINDOWS.values())
    assert checks == [*LEASED_CHECKS.values(), *VESSEL_CHECKS.values()]
    assert choose([], everything=True, leased=False)[1] == list(VESSEL_CHECKS.values())
    two = "vessels.two_on_one_database"
    assert choose([two], leased=False) == ([], [VESSEL_CHECKS[two]])
    assert VESSEL_CHECKS[two].kind == KIND
    first = next(iter(WINDOWS))
    assert choose([first]) == ([WINDOWS[first]], [])
    assert choose(["leased.repeated_crashes"], leased=False) == (
        [], [LEASED_CHECKS["leased.repeated_crashes"]])
    assert choose(["job.inference_returned"]) == ([], [LEASED_CHECKS[LATE]])
    with pytest.raises(KeyError, match=r"leased\.nope"):
        choose(["leased.nope"])


def test_harness_receipts_exits_1_when_a_leased_receipt_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness import cli
    from harness.receipts import leased_checks

    def failing(check: LeasedCheck, server_dsn: str, out: Path) -> dict[str, Any]:
        out.mkdir(parents=True, exist_ok=True)
        receipt(out, check.name, "failed")
        return json.loads((out / f"{check.name}.json").read_text())

    monkeypatch.setattr(leased_checks, "run_check", failing)
    monkeypatch.setenv("HARNESS_PG_DSN", "postgresql://unused")
    done = CliRunner().invoke(cli.app, ["receipts", "--window", "leased.lost_model_reply",
                                        "--out", str(tmp_path)])
    assert done.exit_code == 1, done.output
    index = json.loads((tmp_path / "index.json").read_text())
    entry = next(e for e in index["leased"] if e["check"] == "leased.lost_model_reply")
    assert entry["verdict"] == "failed"


def test_the_gate_refuses_to_ship_on_a_failed_stale_or_missing_leased_receipt() -> None:
    names = list(LEASED_CHECKS)
    digest = code_digest()
    entries = [{"check": n, "verdict": "proved", "code_digest": digest} for n in names]
    result = gate.GateResult(digest=digest)
    gate._leased_receipts({"leased": entries}, result)
    assert result.ship and len(result.checks) == len(names)

    entries[0] = {**entries[0], "verdict": "failed", "reason": "it broke"}
    entries[1] = {**entries[1], "code_digest": "0" * 64}
    result = gate.GateResult(digest=digest)
    gate._leased_receipts({"leased": entries[:-1]}, result)
    bad = {c.name: c.detail for c in result.checks if not c.ok}
    assert not result.ship
    assert bad[names[0]] == "verdict failed: it broke"
    assert "digest mismatch" in bad[names[1]]
    assert bad[names[-1]] == "missing"


def test_the_ci_policy_requires_the_leased_receipts() -> None:
    policy = gate.Policy.load(Path(__file__).parents[2] / "ci" / "gate.toml")
    assert policy.require_receipts and policy.require_leased and policy.require_vessels


def test_the_index_and_the_gate_know_the_two_vessel_receipt(tmp_path: Path) -> None:
    """The several-Vessel check has its own section in every index format, and the
    gate blocks on it missing, failed or stale like any leased check."""
    (name,) = VESSEL_CHECKS
    receipt(tmp_path, name, "proved", kind=KIND)
    index = write_index(tmp_path)
    (entry,) = index["vessels"]
    assert (entry["check"], entry["verdict"], entry["pids"]) == (name, "proved", [7])
    assert entry["files"]["json"] == f"{name}.json"
    assert name not in {e["check"] for e in index["leased"]}
    assert f"| {name} | proved |" in (tmp_path / "index.md").read_text()
    assert "Several Vessels on one database" in (tmp_path / "index.html").read_text()
    result = gate.GateResult(digest=code_digest())
    gate._vessel_receipts(index, result)
    assert result.ship and [c.suite for c in result.checks] == ["vessel receipts"]
    for doc in ({"vessels": []}, {"vessels": [{**entry, "verdict": "failed"}]},
                {"vessels": [{**entry, "code_digest": "0" * 64}]}):
        result = gate.GateResult(digest=code_digest())
        gate._vessel_receipts(doc, result)
        assert not result.ship
