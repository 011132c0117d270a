"""`harness campaign --shard K/N` and `harness merge`: the shards of a campaign
are disjoint, together are the whole campaign, and merging their reports gives
the verdicts, trace hashes, violations (with replay commands) and coverage of
running it whole (issue M10, "past one machine")."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from sim.campaign import parse_shard, shard

CAMPAIGN = ["campaign", "--scenario", "basic,crashloop", "--profile", "swarm", "--seeds", "1-4"]


def _run(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(args)
    return int(info.value.code or 0)


def _key(doc: dict[str, Any]) -> dict[tuple[str, int], tuple[str, str]]:
    return {(r["scenario"], r["seed"]): (r["verdict"], r["trace_hash"]) for r in doc["results"]}


def _same_campaign(whole: dict[str, Any], merged: dict[str, Any]) -> None:
    assert _key(merged) == _key(whole)
    for field in ("verdict", "simulations", "seeds", "runs_simulated", "coverage",
                  "coverage_gaps", "violations_by_invariant", "by_scenario", "profile"):
        assert merged[field] == whole[field], field
    by = lambda vs: sorted((v["scenario"], v["seed"], v["invariant"], v["replay"]) for v in vs)  # noqa: E731
    assert by(merged["violations"]) == by(whole["violations"])


@pytest.mark.parametrize("broken", [None, "claim_fence"])
def test_merging_the_shards_equals_the_whole_campaign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str | None
) -> None:
    if broken:
        monkeypatch.setenv("SIM_BREAK", broken)
    else:
        monkeypatch.delenv("SIM_BREAK", raising=False)
    status = _run([*CAMPAIGN, "--json", str(tmp_path / "whole.json")])
    shards = [tmp_path / f"shard{k}.json" for k in (1, 2, 3)]
    statuses = [_run([*CAMPAIGN, "--shard", f"{k}/3", "--json", str(p)])
                for k, p in enumerate(shards, 1)]
    docs = [json.loads(p.read_text()) for p in shards]
    assert [d["shard"] for d in docs] == ["1/3", "2/3", "3/3"]
    assert sum(d["simulations"] for d in docs) == 8 and all(d["simulations"] for d in docs)
    merged_status = _run(["merge", *map(str, shards), "--json", str(tmp_path / "merged.json"),
                          "--junit", str(tmp_path / "merged.xml"),
                          "--html", str(tmp_path / "merged.html")])
    whole = json.loads((tmp_path / "whole.json").read_text())
    merged = json.loads((tmp_path / "merged.json").read_text())
    _same_campaign(whole, merged)
    assert merged_status == status == (1 if broken else 0)
    assert max(statuses) == status
    assert (whole["violations"] != []) == bool(broken)
    cases = ET.parse(tmp_path / "merged.xml").getroot().iter("testcase")
    failed = sorted(c.get("name") or "" for c in cases if c.find("failure") is not None)
    assert len(failed) == len(whole["violations"])
    assert "harness campaign" in (tmp_path / "merged.html").read_text()


def test_shards_are_disjoint_and_cover_the_campaign() -> None:
    jobs = [(seed, name, "swarm", None) for name in ("a", "b", "c") for seed in range(1, 11)]
    parts = [shard(jobs, k, 4) for k in range(1, 5)]
    assert sorted(j for p in parts for j in p) == sorted(jobs)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert shard(jobs, 2, 4) == shard(list(jobs), 2, 4)
    assert shard(jobs, 1, 1) == jobs


@pytest.mark.parametrize("spec", ["3/2", "0/2", "x", "1/0", "2", "1/2/3", "-1/2"])
def test_a_bad_shard_is_one_line_and_exit_2(
    spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError):
        parse_shard(spec)
    assert _run(["campaign", "--seeds", "1", "--shard", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --shard") and "\n" not in err


def test_merge_refuses_overlapping_or_foreign_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = tmp_path / "one.json"
    assert _run(["campaign", "--seeds", "1", "--json", str(one)]) == 0
    capsys.readouterr()
    assert _run(["merge", str(one), str(one)]) == 2
    assert "in both" in capsys.readouterr().err
    other = tmp_path / "other.json"
    doc = json.loads(one.read_text())
    other.write_text(json.dumps({**doc, "profile": "calm", "results": []}))
    assert _run(["merge", str(one), str(other)]) == 2
    assert "disagree on profile" in capsys.readouterr().err
    (tmp_path / "junk.json").write_text("{")
    assert _run(["merge", str(tmp_path / "junk.json")]) == 2
    assert _run(["merge", str(tmp_path / "missing.json")]) == 2


def test_merge_refuses_an_incomplete_set_of_shards(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "s1.json"
    assert _run(["campaign", "--seeds", "1-2", "--shard", "1/2", "--json", str(first)]) == 0
    capsys.readouterr()
    assert _run(["merge", str(first)]) == 2
    assert "shard 2/2 missing" in capsys.readouterr().err
