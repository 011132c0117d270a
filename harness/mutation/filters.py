"""Which mutants of a fresh session run: equivalents out, and the CI sample in.

Both mark work items SKIPPED in the cosmic-ray session (its `work_db` API),
with the reason as the result's output, so `cosmic-ray exec` never runs them
and the report can tell an excluded equivalent from a mutant left out of a
sample.
"""

from __future__ import annotations

import ast
import fnmatch
import random
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult

EQUIVALENT = "equivalent: "
NOT_SAMPLED = "not in sample"


@dataclass(frozen=True)
class Rule:
    module: str
    operator: str
    where: str | None  # "annotation" or None
    line: str | None  # a substring of the mutated source line
    after: str | None  # a regex matched at the mutated column (the operator and what follows)
    reason: str


def load_rules(path: Path) -> list[Rule]:
    data = tomllib.loads(path.read_text())
    return [
        Rule(r["module"], r["operator"], r.get("in"), r.get("line"), r.get("after"), r["reason"])
        for r in data.get("rule", [])
    ]


@cache
def _annotation_spans(path: Path) -> tuple[tuple[tuple[int, int], tuple[int, int]], ...]:
    """Spans of annotations that are never evaluated: function signatures and
    local variable annotations, in a module under `from __future__ import annotations`.
    Class-level annotations are left out: dataclasses and pydantic read them."""
    tree = ast.parse(path.read_text())
    future = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )
    if not future:
        return ()
    spans: list[ast.expr] = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        a = fn.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None and arg.annotation is not None:
                spans.append(arg.annotation)
        if fn.returns is not None:
            spans.append(fn.returns)
        for node in ast.walk(fn):
            if isinstance(node, ast.AnnAssign):
                spans.append(node.annotation)
    return tuple(
        ((e.lineno, e.col_offset), (e.end_lineno or e.lineno, e.end_col_offset or 0))
        for e in spans
    )


def in_annotation(module: Path, pos: tuple[int, int]) -> bool:
    return any(lo <= tuple(pos) < hi for lo, hi in _annotation_spans(module))


def _source_line(module: Path, line: int) -> str:
    lines = module.read_text().splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def equivalent_reason(rules: list[Rule], tree: Path, spec: Any) -> str | None:
    """The reason of the first rule matching this mutation spec, or None."""
    module = str(spec.module_path)
    for rule in rules:
        if not fnmatch.fnmatch(module, rule.module):
            continue
        if not fnmatch.fnmatch(spec.operator_name, rule.operator):
            continue
        if rule.where == "annotation" and not in_annotation(tree / module, spec.start_pos):
            continue
        source = _source_line(tree / module, spec.start_pos[0])
        if rule.line is not None and rule.line not in source:
            continue
        if rule.after is not None and not re.match(rule.after, source[spec.start_pos[1]:]):
            continue
        return rule.reason
    return None


def _skip(db: WorkDB, job_ids: list[str], output: str) -> None:
    if job_ids:
        db.set_multiple_results(
            job_ids, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=output)
        )


def apply(session: Path, tree: Path, rules: list[Rule]) -> int:
    """Mark every pending equivalent mutant skipped; returns how many."""
    by_reason: dict[str, list[str]] = {}
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in db.pending_work_items:
            reason = equivalent_reason(rules, tree, item.mutations[0])
            if reason is not None:
                by_reason.setdefault(reason, []).append(item.job_id)
        for reason, ids in by_reason.items():
            _skip(db, ids, EQUIVALENT + reason)
    return sum(len(v) for v in by_reason.values())


def sort_key(item: Any) -> tuple[str, int, int, str, int]:
    s = item.mutations[0]
    return (str(s.module_path), s.start_pos[0], s.start_pos[1], s.operator_name, s.occurrence)


def sample(sessions: list[Path], size: int, seed: int) -> int:
    """Keep a deterministic sample of `size` pending mutants over all sessions.

    The draw is over the mutants sorted by place (module, line, column,
    operator, occurrence), never by cosmic-ray's random job ids, so the same
    code and seed always give the same sample."""
    pending: list[tuple[tuple[str, int, int, str, int], Path, str]] = []
    for session in sessions:
        with use_db(str(session), WorkDB.Mode.open) as db:
            pending += [(sort_key(i), session, i.job_id) for i in db.pending_work_items]
    pending.sort()
    keep = {job for _, _, job in random.Random(seed).sample(pending, min(size, len(pending)))}
    for session in sessions:
        drop = [job for _, s, job in pending if s == session and job not in keep]
        with use_db(str(session), WorkDB.Mode.open) as db:
            _skip(db, drop, NOT_SAMPLED)
    return len(keep)
