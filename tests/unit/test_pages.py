"""The pages people read (issue M15): the replay page's axis, legend, Run
lanes, labelled marks, fired faults, the violating Run's history shown at
once and the commands; the campaign page's scenario x point grid and its
links to replay pages; the receipts index's totals and links. Rendering in
Chromium is `tests/browser`; here the structure, and the script's syntax."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import report
from harness.cli import main
from harness.receipts.index import write_index
from sim.kernel import run_simulation


@pytest.fixture(scope="module")
def broken() -> object:
    for seed in range(1, 30):
        result = run_simulation(seed, "cancel", "default", break_name="no_containment")
        if result.violation:
            return result
    raise AssertionError("no failing cancel seed under no_containment")


def test_the_replay_page_shows_axis_legend_run_lanes_faults_history_and_commands(
    broken: object,
) -> None:
    page = report.replay_html(broken, "REPLAY-CMD", "SHRINK-CMD")  # type: ignore[arg-type]
    for needle in ("class=axis", "class=legend", "class='lane run bad'", "id=faults",
                   "id=replay-command>REPLAY-CMD", "id=shrink-command>SHRINK-CMD",
                   "(the violating Run)", "class=label"):
        assert needle in page, needle
    assert "ledger transaction" in page and "boot crash" in page
    faults = re.search(r"<ol id=faults>(.*?)</ol>", page)
    assert faults and faults.group(1).count("<li>") == max(1, len(broken.fired.faults))  # type: ignore[attr-defined]


def test_the_replay_page_script_parses(broken: object, tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the browser step renders the page)")
    page = report.replay_html(broken)  # type: ignore[arg-type]
    script = page.split("<script>", 1)[1].split("</script>", 1)[0]
    (tmp_path / "page.js").write_text(script)
    done = subprocess.run([node, "--check", str(tmp_path / "page.js")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_campaign_page_has_a_grid_and_links_each_violation_to_its_replay_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIM_BREAK", "no_containment")
    with pytest.raises(SystemExit) as info:
        main(["campaign", "--scenario", "cancel", "--seeds", "1-3", "--progress-every", "0",
              "--html", str(tmp_path / "c.html"), "--json", str(tmp_path / "c.json")])
    assert info.value.code == 1
    page = (tmp_path / "c.html").read_text()
    doc = json.loads((tmp_path / "c.json").read_text())
    assert "id=grid" in page and "<th>cancel</th>" in page
    links = re.findall(r"href='(c-replays/[^']+)'", page)
    assert len(links) == len(doc["violations"]) > 0
    for href in links:
        replay = (tmp_path / href).read_text()
        assert "SIM_BREAK=no_containment harness replay" in replay and "id='violation'" in replay


def test_the_receipts_index_has_totals_and_links(tmp_path: Path) -> None:
    (tmp_path / "claim.committed.json").write_text(json.dumps(
        {"window": "claim.committed", "verdict": "proved", "code_digest": "x"}))
    (tmp_path / "claim.committed").mkdir()
    (tmp_path / "claim.committed" / "boot1.log").write_text("log\n")
    index = write_index(tmp_path)
    page = (tmp_path / "index.html").read_text()
    totals = re.search(r"id=totals>Windows: ([^.]*)\. Leased checks: ([^.]*)\.", page)
    assert totals and "1 stale" in totals.group(1) and "missing" in totals.group(2)
    assert "href='claim.committed.json'" in page and "href='claim.committed/boot1.log'" in page
    entry = next(w for w in index["windows"] if w["window"] == "claim.committed")
    assert entry["files"] == {"json": "claim.committed.json", "logs": ["claim.committed/boot1.log"]}
    assert f"Windows: {totals.group(1)}." in (tmp_path / "index.md").read_text()
