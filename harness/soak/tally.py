"""The soak's verdict, read from the ledger after every Run had time to settle.

Definitions (each one a way the engine could betray a caller):
- lost: a key the system acknowledged with a Run id, and no such Run exists;
- duplicated: one key with two Runs, a replay of a key answered with another
  Run, or a Run with more than one terminal Step;
- stuck: an acknowledged Run (or probe) that is not terminal at the end;
- failed_as_lost: FAILED because its hop died with a killed boot (allowed);
- failed_live: FAILED as lost although the boot that held it was never
  killed: a live Vessel's work was taken from it;
- failed_other: FAILED for any other reason (a bug: no Pattern here fails).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.soak.chaos import Fault
from harness.soak.clients import Admission
from runtime.events.model import TERMINAL_KINDS
from runtime.models import LedgerDump

TERMINAL = {"DONE", "FAILED", "CANCELLED"}
FATAL = ("lost", "duplicated", "stuck", "failed_live", "failed_other", "invariants",
         "unrecovered")


@dataclass
class Tally:
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    recovery: dict[str, Any] = field(default_factory=dict)

    def add(self, what: str, example: str | None = None) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        if example is not None and len(self.examples.setdefault(what, [])) < 5:
            self.examples[what].append(example)

    @property
    def passed(self) -> bool:
        return not any(self.counts.get(k) for k in FATAL)


def tally(admissions: list[Admission], probes: list[str], faults: list[Fault],
          dump: LedgerDump, invariants: list[dict[str, Any]],
          killed_boots: set[str]) -> Tally:
    out = Tally(counts={k: 0 for k in ("admitted", "rejected", "unanswered", "terminal",
                                       "done", "cancelled", "failed_as_lost", *FATAL)})
    runs = {str(r.id): r for r in dump.runs}
    _admissions(out, admissions, runs)
    _keys(out, dump)
    _terminal_steps(out, dump)
    expected = [a.run_id for a in admissions if a.run_id] + probes
    _outcomes(out, expected, runs, _holders(dump), killed_boots)
    for v in invariants:
        if not v["held"]:
            out.add("invariants", f"{v['invariant']}: {v['message'][:200]}")
    _recovery(out, faults)
    return out


def _admissions(out: Tally, admissions: list[Admission], runs: dict[str, Any]) -> None:
    for a in admissions:
        if a.run_id is None:
            out.add("rejected" if a.rejected else "unanswered", f"{a.plan.key}: {a.rejected}")
            continue
        out.add("admitted")
        if a.run_id not in runs:
            out.add("lost", f"{a.plan.key} -> {a.run_id}")
        if a.replay_id is not None and a.replay_id != a.run_id:
            out.add("duplicated", f"{a.plan.key}: {a.run_id} then {a.replay_id}")


def _keys(out: Tally, dump: LedgerDump) -> None:
    per_key = Counter((r.intent.source, r.intent.sigil, r.intent.idempotency_key)
                      for r in dump.runs if r.intent.idempotency_key)
    for (source, sigil, key), n in per_key.items():
        if n > 1:
            out.add("duplicated", f"{source}/{sigil}/{key}: {n} Runs")


def _terminal_steps(out: Tally, dump: LedgerDump) -> None:
    per_run = Counter(str(s.run_id) for s in dump.steps if s.kind in TERMINAL_KINDS)
    for run_id, n in per_run.items():
        if n > 1:
            out.add("duplicated", f"Run {run_id}: {n} terminal Steps")


def _holders(dump: LedgerDump) -> dict[str, str | None]:
    """Each Run's boot of its latest claimed delivery."""
    latest: dict[str, tuple[int, str | None]] = {}
    for d in dump.deliveries:
        key = str(d.run_id)
        if d.claimed_boot and (key not in latest or d.seq > latest[key][0]):
            latest[key] = (d.seq, d.claimed_boot)
    return {k: boot for k, (_, boot) in latest.items()}


def _outcomes(out: Tally, expected: list[str], runs: dict[str, Any],
              holders: dict[str, str | None], killed_boots: set[str]) -> None:
    for run_id in expected:
        run = runs.get(run_id)
        if run is None:
            continue  # counted as lost above (probes: the probe never got an id)
        status = run.status.value
        if status not in TERMINAL:
            out.add("stuck", f"{run_id} {run.pattern} {status}")
            continue
        out.add("terminal")
        if status == "DONE":
            out.add("done")
        elif status == "CANCELLED":
            out.add("cancelled")
        elif (run.error or "").startswith("lost"):
            holder = holders.get(run_id)
            if holder is not None and holder not in killed_boots:
                out.add("failed_live", f"{run_id} held by live boot {holder}: {run.error}")
            else:
                out.add("failed_as_lost", f"{run_id}: {run.error}")
        else:
            out.add("failed_other", f"{run_id} {run.pattern}: {(run.error or '')[:200]}")


def _recovery(out: Tally, faults: list[Fault]) -> None:
    for kind in ("kill", "pg_restart"):
        mine = [f for f in faults if f.kind == kind]
        for f in mine:
            if f.recovered_s is None:
                out.add("unrecovered", f"{f.detail} at {f.at_s}s: {f.note}")
        times = sorted(f.recovered_s for f in mine if f.recovered_s is not None)
        done = sorted(f.completed_s for f in mine if f.completed_s is not None)
        out.recovery[kind] = {"faults": len(mine), **_spread("", times),
                              **_spread("probe_done_", done)}


def _spread(prefix: str, times: list[float]) -> dict[str, float | None]:
    return {
        f"{prefix}p50_s": round(statistics.median(times), 3) if times else None,
        f"{prefix}p99_s": round(_percentile(times, 0.99), 3) if times else None,
        f"{prefix}max_s": round(times[-1], 3) if times else None,
    }


def _percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]
