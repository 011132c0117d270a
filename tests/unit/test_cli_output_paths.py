"""Output paths are ready before any simulation runs: missing parent folders
are created, and a path that cannot be written is refused up front (one
line, exit 2) instead of failing after the work is done (issue M15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

POLICY = str(Path(__file__).resolve().parents[2] / "ci" / "gate.toml")


def _exit(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return int(info.value.code or 0)


def test_a_campaign_on_a_fresh_clone_creates_its_report_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = _exit(["campaign", "--scenario", "basic", "--seeds", "1-2",
                  "--json", "new/dir/r.json", "--junit", "x/j.xml", "--html", "y/z/c.html"])
    assert code == 0
    assert json.loads((tmp_path / "new/dir/r.json").read_text())["violations"] == []
    assert (tmp_path / "x/j.xml").read_text().startswith("<?xml")
    assert (tmp_path / "y/z/c.html").exists()


@pytest.mark.parametrize("argv", [
    ["campaign", "--json", "blocker/r.json"],
    ["campaign", "--junit", "blocker/sub/j.xml"],
    ["campaign", "--html", "."],
    ["replay", "--seed", "1", "--trace", "blocker/t.jsonl"],
    ["shrink", "--seed", "1", "--emit-test", "blocker/test_x.py"],
    ["shrink", "--seed", "1", "--out", "blocker/plan.json"],
    ["gate", "--policy", POLICY, "--out", "blocker"],
    ["receipts", "--all", "--out", "blocker/receipts"],
])
def test_an_output_path_that_cannot_be_created_is_refused_before_any_work(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "blocker").write_text("a file where a folder is needed\n")

    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("work started before the output path was checked")

    import harness.gate
    import harness.pg
    import sim.campaign
    import sim.kernel
    import sim.shrink
    monkeypatch.setattr(sim.campaign, "run_campaign", no_work)
    monkeypatch.setattr(sim.kernel, "run_simulation", no_work)
    monkeypatch.setattr(sim.shrink, "shrink", no_work)
    monkeypatch.setattr(harness.gate, "run_gate", no_work)
    monkeypatch.setattr(harness.pg, "provision", no_work)
    assert _exit(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert "blocker" in err or "folder" in err, err
