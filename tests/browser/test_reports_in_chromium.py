"""The HTML reports in headless Chromium: each page loads without console
errors, renders to a screenshot, and shows an element for the failing
invariant. Runs in its own CI step after Chromium is installed
(`pytest -m browser`); HARNESS_REQUIRE_BROWSER=1 turns a missing browser
into a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import report
from sim.campaign import CampaignReport, summarize
from sim.kernel import run_simulation

pytestmark = pytest.mark.browser

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("HARNESS_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is required (HARNESS_REQUIRE_BROWSER=1) but not installed")
        pytest.skip("chromium is not installed: apt-get install chromium")
    return found


def _render(page: Path, tmp_path: Path) -> tuple[str, Path]:
    browser = _chromium()
    shot = tmp_path / (page.stem + ".png")
    common = [browser, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120)
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1280,900", page.as_uri()],
                   capture_output=True, text=True, timeout=120)
    console_errors = [line for line in dom.stderr.splitlines()
                      if "Uncaught" in line or ("CONSOLE" in line and "error" in line.lower())]
    assert console_errors == [], console_errors
    assert shot.exists() and shot.stat().st_size > 1000, "no screenshot was taken"
    return dom.stdout, shot


def _failing_seed() -> int:
    for seed in range(1, 100):
        if run_simulation(seed, "basic", "swarm", break_name="claim_fence").violation:
            return seed
    raise AssertionError("no failing seed under the broken fence")


def test_replay_page_shows_the_violated_invariant(tmp_path: Path) -> None:
    seed = _failing_seed()
    result = run_simulation(seed, "basic", "swarm", break_name="claim_fence")
    page = tmp_path / "replay.html"
    page.write_text(report.replay_html(result))
    dom, _ = _render(page, tmp_path)
    assert 'id="violation"' in dom
    assert 'data-invariant="claim_is_exact"' in dom
    assert 'class="mark' in dom  # the timeline rendered
    for needle in ('class="axis"', 'class="legend"', 'class="lane run bad"', 'id="faults"',
                   'id="replay-command"', 'id="shrink-command"', "(the violating Run)"):
        assert needle in dom, needle


def test_campaign_page_shows_violations_and_coverage(tmp_path: Path) -> None:
    seed = _failing_seed()
    rep = CampaignReport()
    for s in (seed, seed + 1):
        r = summarize(run_simulation(s, "basic", "swarm", break_name="claim_fence"))
        r["replay"] = f"SIM_BREAK=claim_fence harness replay --seed {s} --scenario basic"
        rep.results.append(r)
    rep.wall_s = 1.0
    page = tmp_path / "campaign.html"
    page.write_text(report.campaign_html(report.campaign_json(rep, ["basic"], "swarm")))
    dom, _ = _render(page, tmp_path)
    assert 'id="inv-claim_is_exact"' in dom
    assert "Fault-point coverage" in dom
    assert 'id="grid"' in dom and "<th>basic</th>" in dom


def test_receipts_index_shows_totals_and_links(tmp_path: Path) -> None:
    import json

    from harness.receipts.index import write_index

    (tmp_path / "claim.committed.json").write_text(json.dumps(
        {"window": "claim.committed", "verdict": "proved", "code_digest": "x"}))
    (tmp_path / "claim.committed").mkdir()
    (tmp_path / "claim.committed" / "boot1.log").write_text("log\n")
    write_index(tmp_path)
    dom, _ = _render(tmp_path / "index.html", tmp_path)
    assert 'id="totals"' in dom and "Leased checks:" in dom
    assert 'href="claim.committed/boot1.log"' in dom
