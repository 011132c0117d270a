"""The mutation report: killed / survived / timeout per mutant, kill rate, seeds-to-detection.

Reads the cosmic-ray sessions of a run (`OUT/<group>.sqlite`) and writes
`OUT/report.json` and `OUT/report.md`. Kill rate = (killed + timeout) /
(killed + timeout + survived): equivalent mutants (ci/mutation-equivalents.toml)
and mutants outside a sample are excluded, pending ones (a run cut short) are
counted apart. Survivors are the oracle's to-do list: each is listed with its
place, its diff and a hint of what the simulator failed to observe.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome

from harness.mutation import filters
from harness.mutation.config import Group
from harness.mutation.killer import VERDICT_PREFIX

HINTS = {
    "ExceptionReplacer": "the except branch never runs in these scenarios, or its handling is "
    "unobserved: inject the fault that raises it",
    "ZeroIterationForLoop": "skipping the loop changes nothing the checker sees: a workload with "
    "more than one item, or an invariant on what each iteration does",
    "NumberReplacer": "no invariant pins this constant (limit, delay, index): check the bound "
    "it implements",
    "RemoveDecorator": "the decorator's behaviour is unobserved",
    "ReplaceTrueWithFalse": "the flag's effect is unobserved",
    "ReplaceFalseWithTrue": "the flag's effect is unobserved",
    "AddNot": "the branch is flipped without a visible difference: the branch is unreached "
    "(no workload drives it) or its outcome is unchecked",
    "ReplaceComparisonOperator": "the boundary or identity test is unobserved: drive the edge "
    "case or check its outcome",
    "ReplaceBinaryOperator": "the arithmetic result is unchecked",
    "ReplaceAndWithOr": "one side of the condition is never decisive in these scenarios",
    "ReplaceOrWithAnd": "one side of the condition is never decisive in these scenarios",
    "ReplaceUnaryOperator": "the negation is unobserved",
    "ReplaceContinueWithBreak": "the items after the skipped one are never needed",
    "ReplaceBreakWithContinue": "iterations after the break are harmless here",
}


@dataclass
class Mutant:
    group: str
    job_id: str
    module: str
    line: int
    col: int
    operator: str
    function: str | None
    status: str  # killed | timeout | survived | incompetent | equivalent | excluded | pending
    seeds: int | None = None
    simulations: int | None = None
    scenario: str | None = None
    invariant: str | None = None
    detail: str | None = None
    diff: str | None = None
    reason: str | None = None

    @property
    def hint(self) -> str:
        for key, text in HINTS.items():
            if key in self.operator:
                return text
        return "the mutation is unobserved by these scenarios"


def _verdict(output: str | None) -> dict[str, Any]:
    for line in reversed((output or "").splitlines()):
        if line.startswith(VERDICT_PREFIX):
            parsed: dict[str, Any] = json.loads(line[len(VERDICT_PREFIX):])
            return parsed
    return {}


def _short_diff(diff: str | None) -> str | None:
    if not diff:
        return None
    keep = [ln for ln in diff.splitlines()
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return "\n".join(keep[:6]) or None


def _mutant(group: str, item: Any, result: Any) -> Mutant:
    spec = item.mutations[0]
    m = Mutant(group, item.job_id, str(spec.module_path), spec.start_pos[0], spec.start_pos[1],
               spec.operator_name.removeprefix("core/"), spec.definition_name, "pending")
    if result is None:
        return m
    output = result.output or ""
    if result.worker_outcome == WorkerOutcome.SKIPPED:
        if output.startswith(filters.EQUIVALENT):
            m.status, m.reason = "equivalent", output.removeprefix(filters.EQUIVALENT)
        else:
            m.status, m.reason = "excluded", output
        return m
    m.diff = _short_diff(result.diff)
    if result.test_outcome == TestOutcome.INCOMPETENT or result.worker_outcome != "normal":
        m.status, m.detail = "incompetent", output[-300:]
        return m
    if result.test_outcome == TestOutcome.KILLED and output.strip() == "timeout":
        m.status = "timeout"
        return m
    v = _verdict(output)
    m.status = "killed" if result.test_outcome == TestOutcome.KILLED else "survived"
    m.seeds, m.simulations = v.get("seeds"), v.get("simulations")
    m.scenario, m.invariant, m.detail = v.get("scenario"), v.get("invariant"), v.get("detail")
    if m.status == "killed" and not v:
        m.detail = output[-300:]  # the killer died before its verdict line
    return m


def collect(out: Path, groups: list[Group], rules: list[filters.Rule]) -> list[Mutant]:
    """Every mutant of the run's sessions. The equivalence rules apply again here,
    so a rule added after a run reclassifies its mutants without re-running them."""
    mutants: list[Mutant] = []
    for group in groups:
        session = out / f"{group.name}.sqlite"
        if not session.exists():
            continue
        with use_db(str(session), WorkDB.Mode.open) as db:
            results = {job: r for job, r in db.results}
            for item in sorted(db.work_items, key=filters.sort_key):
                m = _mutant(group.name, item, results.get(item.job_id))
                # A rule never reclassifies a killed mutant: being killed proves it
                # was not equivalent (the rule is too broad there, not the mutant).
                if m.status in ("survived", "pending"):
                    reason = filters.equivalent_reason(rules, out / "tree", item.mutations[0])
                    if reason is not None:
                        m.status, m.reason = "equivalent", reason
                mutants.append(m)
    return mutants


def summarise(mutants: list[Mutant]) -> dict[str, Any]:
    count = {s: sum(m.status == s for m in mutants) for s in
             ("killed", "timeout", "survived", "incompetent", "equivalent", "excluded", "pending")}
    judged = count["killed"] + count["timeout"] + count["survived"]
    seeds = [m.seeds for m in mutants if m.status == "killed" and m.seeds is not None]
    by_module: dict[str, dict[str, int]] = {}
    for m in mutants:
        if m.status in ("killed", "timeout", "survived"):
            row = by_module.setdefault(m.module, {"killed": 0, "timeout": 0, "survived": 0})
            row[m.status] += 1
    return {
        "counts": count,
        "judged": judged,
        "kill_rate": round((count["killed"] + count["timeout"]) / judged, 4) if judged else None,
        "seeds_to_detection": {
            "median": statistics.median(seeds) if seeds else None,
            "max": max(seeds) if seeds else None,
            "histogram": {str(k): seeds.count(k) for k in sorted(set(seeds))},
        },
        "by_module": by_module,
    }


def write(out: Path, groups: list[Group], meta: dict[str, Any],
          rules: list[filters.Rule]) -> dict[str, Any]:
    mutants = collect(out, groups, rules)
    summary = summarise(mutants)
    doc = {"meta": meta, "summary": summary, "mutants": [asdict(m) for m in mutants]}
    (out / "report.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    (out / "report.md").write_text(_markdown(mutants, summary, meta, groups))
    return summary


def _markdown(mutants: list[Mutant], s: dict[str, Any], meta: dict[str, Any],
              groups: list[Group]) -> str:
    c, std = s["counts"], s["seeds_to_detection"]
    rate = "n/a" if s["kill_rate"] is None else f"{100 * s['kill_rate']:.1f}%"
    lines = [
        "# Mutation report (runtime/ core, killer: focused simulator campaign)",
        "",
        f"- tool: cosmic-ray; profile `{meta.get('profile')}`, seeds 1..{meta.get('seeds')} "
        f"per mutant, seed-major, stop at the first violation",
        f"- **kill rate {rate}** over {s['judged']} judged mutants: killed {c['killed']}, "
        f"timeout {c['timeout']}, survived {c['survived']}",
        f"- excluded: equivalent {c['equivalent']}, outside the sample {c['excluded']}; "
        f"incompetent {c['incompetent']}; pending (not run yet) {c['pending']}",
        f"- seeds-to-detection of killed mutants: median {std['median']}, max {std['max']}, "
        f"histogram {std['histogram']}",
        "",
        "## Groups",
        "",
        "| group | modules | focus scenarios |",
        "|---|---|---|",
        *(f"| {g.name} | {', '.join(g.modules)} | {', '.join(g.scenarios)} |" for g in groups),
        "",
        "## By module",
        "",
        "| module | killed | timeout | survived | kill rate |",
        "|---|---|---|---|---|",
    ]
    for module, row in sorted(s["by_module"].items()):
        n = sum(row.values())
        lines.append(f"| {module} | {row['killed']} | {row['timeout']} | {row['survived']} | "
                     f"{100 * (row['killed'] + row['timeout']) / n:.0f}% |")
    lines += ["", "## Survivors (the oracle's to-do list)", ""]
    survivors = [m for m in mutants if m.status == "survived"]
    if not survivors:
        lines.append("none")
    for m in survivors:
        lines += [
            f"- `{m.module}:{m.line}:{m.col}` in `{m.function}`: {m.operator} "
            f"(group {m.group}, {m.simulations} simulations held)",
            f"  - hint: {m.hint}",
        ]
        if m.diff:
            lines += ["  ```diff", *("  " + d for d in m.diff.splitlines()), "  ```"]
    lines += ["", "## Killed: where and by what", "",
              "| module:line | operator | seeds | scenario | invariant |", "|---|---|---|---|---|"]
    for m in mutants:
        if m.status in ("killed", "timeout"):
            lines.append(f"| {m.module}:{m.line} | {m.operator} | {m.seeds or '-'} | "
                         f"{m.scenario or '-'} | {m.invariant or m.status} |")
    incompetent = [m for m in mutants if m.status == "incompetent"]
    if incompetent:
        lines += ["", "## Incompetent (the killer could not run)", ""]
        lines += [f"- `{m.module}:{m.line}` {m.operator}: {m.detail}" for m in incompetent]
    return "\n".join(lines) + "\n"


def pending(out: Path, group: Group) -> int:
    """How many mutants of the group's session still wait to run."""
    session = out / f"{group.name}.sqlite"
    if not session.exists():
        return 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        return sum(1 for _ in db.pending_work_items)
