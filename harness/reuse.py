"""Reuse of campaign reports by the gate (`harness gate --reuse DIR`).

CI runs the long campaigns in their own step and then the gate, whose
policy campaigns are largely the same simulations (all scenarios x swarm
x 1-300, the step's own 1-300). A simulation is a pure function of
(seed, scenario, profile, SIM_BREAK) and the code, so the gate may take its
result from a campaign report instead of running it again, provided the
report was written by this code (`code_digest` over `runtime/` and `sim/`)
under the same break. Everything else is simulated as before; the
determinism audit still re-runs a sample in fresh processes and compares
their trace hashes with the reused ones.

A report that cannot be used (another schema, other code, another break,
unreadable) is skipped with its reason; it never fails the gate by itself.

Receipts likewise (`harness gate --reuse-receipts`): the restart step proves
every reachable window and every leased-job check on real processes and,
with `HARNESS_RECEIPTS_OUT`, keeps each proved receipt in the gate's receipts
folder; the gate then indexes and checks them instead of proving them again.
A receipt from other code is stale and a reachable window without one is
missing: either blocks shipping.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.catalogue_check import code_digest

ROOT = Path(__file__).resolve().parents[1]
Key = tuple[str, str, int]
"""(profile, scenario, seed)."""


def simulation_digest() -> str:
    """SHA-256 over the runtime's and the simulator's sources: what a result depends on."""
    h = hashlib.sha256()
    for package in ("runtime", "sim"):
        h.update(code_digest(ROOT / package).encode())
    return h.hexdigest()


@dataclass
class Reused:
    """Results available for reuse, keyed by (profile, scenario, seed)."""

    results: dict[Key, dict[str, Any]] = field(default_factory=dict)
    used: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def take(self, jobs: list[Any]) -> tuple[list[dict[str, Any]], list[Any]]:
        """Split seed jobs `(seed, scenario, profile, break)` into reused results and the
        jobs still to simulate."""
        reused: list[dict[str, Any]] = []
        rest: list[Any] = []
        for job in jobs:
            seed, scenario, profile, _ = job
            found = self.results.get((profile, scenario, seed))
            if found is None:
                rest.append(job)
            else:
                reused.append(dict(found))
        return reused, rest


def reachable_windows() -> list[str]:
    """The crash windows a real Vessel restart is driven into over HTTP."""
    from harness.receipts.windows import WINDOWS

    return sorted(w.point for w in WINDOWS.values() if w.unreachable is None)


def index_reused_receipts(root: Path) -> None:
    """Index the receipts an earlier step left in `root` (nothing to index: no index)."""
    from harness.receipts.index import write_index

    if root.is_dir() and any(p.name != "index.json" for p in root.glob("*.json")):
        write_index(root)


def _files(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(path.glob("*.json")) if path.is_dir() else [path])
    return found


def _result(doc: dict[str, Any], row: dict[str, Any],
            violations: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """A campaign summary (`sim.campaign.summarize`) rebuilt from a report row."""
    v = violations.get((row["scenario"], row["seed"]), {})
    return {
        **row,
        "profile": doc["profile"],
        "invariant": v.get("invariant"),
        "message": v.get("message"),
        "records": v.get("records", {}),
        "coverage": {"hits": {}, "fires": dict(row.get("fires", {})), "kinds": {}},
        "reused": True,
    }


def load(paths: list[Path], break_name: str | None) -> Reused:
    """Index every usable report under `paths` (files or folders of `*.json`)."""
    reused = Reused()
    digest = simulation_digest()
    for path in _files(paths):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            reused.skipped.append(f"{path}: unreadable ({exc})")
            continue
        why = _unusable(doc, digest, break_name)
        if why:
            reused.skipped.append(f"{path}: {why}")
            continue
        violations = {(v["scenario"], v["seed"]): v for v in doc.get("violations", [])}
        for row in doc["results"]:
            key = (doc["profile"], row["scenario"], row["seed"])
            reused.results.setdefault(key, _result(doc, row, violations))
        reused.used.append(str(path))
    return reused


def _unusable(doc: Any, digest: str, break_name: str | None) -> str | None:
    if not isinstance(doc, dict) or int(doc.get("schema_version") or 0) < 2:
        return "not a campaign report of schema 2 or later"
    if doc.get("code_digest") != digest:
        return "written by other code (code_digest differs)"
    if doc.get("break") != break_name:
        return f"written under SIM_BREAK={doc.get('break')}, not {break_name}"
    if not all("fires" in r and "wall_s" in r for r in doc.get("results", [])):
        return "its results lack fires or wall_s"
    return None
