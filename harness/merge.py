"""`harness merge`: shard reports of one campaign combined into one report.

`harness campaign --shard K/N` runs a deterministic slice of the campaign's
simulations (`sim.campaign.shard`) and writes the usual JSON report with
`shard: "K/N"`. Merging the N reports gives the report the whole campaign
would have written: results concatenated (in scenario, seed order),
coverage summed point by point and kind by kind, violations listed with
their replay commands, the verdict recomputed from them. A simulation is a
pure function of (seed, scenario, profile, SIM_BREAK, code), so the reports
must agree on the profile, the break and the code that wrote them, no
simulation may appear in two of them, and shard reports must be all N
shards of one split (a shard lost in CI is an error, not a smaller campaign).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.reuse import _result
from sim.campaign import CampaignReport


class MergeError(Exception):
    """Reports that cannot be merged: one line, exit 2."""


@dataclass
class MergedReport(CampaignReport):
    """A CampaignReport whose coverage is the sum of its shards' coverage
    (a report keeps per-result fires only, not hits)."""

    summed: dict[str, Any] = field(default_factory=dict)
    shards: list[str] = field(default_factory=list)

    def coverage(self) -> dict[str, Any]:
        return self.summed


@dataclass(frozen=True)
class Merged:
    report: MergedReport
    scenarios: list[str]
    profile: str
    require_coverage: bool
    code_digest: str | None
    break_name: str | None


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise MergeError(f"report {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise MergeError(f"report {path} is not readable JSON: {exc}") from None
    if not isinstance(doc, dict) or int(doc.get("schema_version") or 0) < 2 \
            or not isinstance(doc.get("results"), list):
        raise MergeError(f"report {path} is not a campaign report of schema 2 or later")
    return doc


def _same(docs: list[tuple[Path, dict[str, Any]]], key: str) -> Any:
    first_path, first = docs[0]
    for path, doc in docs[1:]:
        if doc.get(key) != first.get(key):
            raise MergeError(f"reports disagree on {key}: {first_path} has "
                             f"{first.get(key)!r}, {path} has {doc.get(key)!r}")
    return first.get(key)


def _coverage(docs: list[dict[str, Any]]) -> dict[str, Any]:
    hits: Counter[str] = Counter()
    fires: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for doc in docs:
        for point, c in doc.get("coverage", {}).get("points", {}).items():
            hits[point] += c.get("hits", 0)
            fires[point] += c.get("fires", 0)
        kinds.update(doc.get("coverage", {}).get("kinds", {}))
    points = {p: {"hits": hits[p], "fires": fires[p]} for p in sorted(set(hits) | set(fires))}
    return {"points": points, "kinds": dict(sorted(kinds.items()))}


def _complete(docs: list[tuple[Path, dict[str, Any]]]) -> None:
    """Shard reports (`shard: "K/N"`) must be all N shards of one split, each once."""
    shards = [(path, doc.get("shard")) for path, doc in docs]
    if all(s is None for _, s in shards):
        return  # whole campaigns (say, of other scenarios): nothing to complete
    parts: dict[int, Path] = {}
    totals: set[int] = set()
    for path, spec in shards:
        if spec is None:
            raise MergeError(f"report {path} is not a shard, the others are")
        k, _, n = str(spec).partition("/")
        if int(k) in parts:
            raise MergeError(f"shard {spec} is given twice: {parts[int(k)]} and {path}")
        parts[int(k)] = path
        totals.add(int(n))
    if len(totals) != 1:
        raise MergeError(f"the reports are shards of different splits: N in {sorted(totals)}")
    total = totals.pop()
    missing = [f"{k}/{total}" for k in range(1, total + 1) if k not in parts]
    if missing:
        raise MergeError(f"shard {', '.join(missing)} missing: merge all {total} shards")


def merge(paths: list[Path]) -> Merged:
    """Combine the shard reports at `paths`; MergeError says why they cannot be."""
    if not paths:
        raise MergeError("no reports given")
    docs = [(path, _load(path)) for path in paths]
    _complete(docs)
    profile = _same(docs, "profile")
    code = _same(docs, "code_digest")
    break_name = _same(docs, "break")
    seen: dict[tuple[str, int], Path] = {}
    results: list[dict[str, Any]] = []
    scenarios: list[str] = []
    for path, doc in docs:
        violations = {(v["scenario"], v["seed"]): v for v in doc.get("violations", [])}
        for row in doc["results"]:
            key = (row["scenario"], row["seed"])
            if key in seen:
                raise MergeError(f"seed {key[1]} of {key[0]} is in both {seen[key]} and {path}")
            seen[key] = path
            result = _result(doc, row, violations)
            result.pop("reused", None)
            replay = violations.get(key, {}).get("replay")
            if replay is not None:
                result["replay"] = replay
            results.append(result)
        scenarios.extend(n for n in doc.get("scenarios", []) if n not in scenarios)
    results.sort(key=lambda r: (r["scenario"], r["seed"]))
    report = MergedReport(
        results=results,
        wall_s=max(float(doc.get("wall_s", 0.0)) for _, doc in docs),
        summed=_coverage([doc for _, doc in docs]),
        shards=[str(doc.get("shard") or path) for path, doc in docs],
    )
    return Merged(
        report=report,
        scenarios=scenarios,
        profile=str(profile),
        require_coverage=any(bool(doc.get("require_coverage")) for _, doc in docs),
        code_digest=code,
        break_name=break_name,
    )
