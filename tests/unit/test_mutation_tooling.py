"""The mutation tooling's own logic (harness/mutation), without running a mutant."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.mutation import filters, report
from harness.mutation.killer import VERDICT_PREFIX

MODULE = '''from __future__ import annotations
from dataclasses import dataclass

@dataclass
class Row:
    value: int | None

def f(x: int | None) -> str | None:
    y: int | None = x
    return None if y is None else str(y | 1)
'''


def _spec(module: str, operator: str, line: int, col: int) -> SimpleNamespace:
    return SimpleNamespace(module_path=module, operator_name=operator, start_pos=(line, col))


def test_annotation_rule_excludes_signatures_and_locals_only(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(MODULE)
    rules = [filters.Rule("*.py", "core/ReplaceBinaryOperator_BitOr_*", "annotation", None, None,
                          "r")]
    op = "core/ReplaceBinaryOperator_BitOr_Sub"
    assert filters.equivalent_reason(rules, tmp_path, _spec("m.py", op, 8, 13)) == "r"  # arg
    assert filters.equivalent_reason(rules, tmp_path, _spec("m.py", op, 8, 28)) == "r"  # return
    assert filters.equivalent_reason(rules, tmp_path, _spec("m.py", op, 9, 7)) == "r"  # local
    # A dataclass field's annotation is read at runtime; an expression is evaluated.
    assert filters.equivalent_reason(rules, tmp_path, _spec("m.py", op, 6, 11)) is None
    assert filters.equivalent_reason(rules, tmp_path, _spec("m.py", op, 10, 42)) is None


def test_line_rule_matches_on_source_text(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(MODULE)
    rules = [filters.Rule("m.py", "core/AddNot", None, "return None", None, "why")]
    assert filters.equivalent_reason(rules, tmp_path, _spec("m.py", "core/AddNot", 10, 4)) == "why"
    assert filters.equivalent_reason(rules, tmp_path, _spec("m.py", "core/AddNot", 9, 4)) is None


def test_verdict_line_is_parsed_from_the_killer_output() -> None:
    out = 'noise\n' + VERDICT_PREFIX + '{"killed": true, "seeds": 3, "invariant": "x"}\n'
    assert report._verdict(out) == {"killed": True, "seeds": 3, "invariant": "x"}
    assert report._verdict("timeout") == {}


def test_kill_rate_counts_timeouts_as_killed_and_excludes_equivalents() -> None:
    def m(status: str, seeds: int | None = None) -> report.Mutant:
        return report.Mutant("g", "j", "runtime/x.py", 1, 0, "AddNot", "f", status, seeds=seeds)

    s = report.summarise([m("killed", 1), m("killed", 5), m("timeout"), m("survived"),
                          m("equivalent"), m("excluded"), m("pending")])
    assert s["judged"] == 4
    assert s["kill_rate"] == 0.75
    assert s["seeds_to_detection"]["median"] == 3


def test_after_rule_matches_at_the_mutated_column(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(MODULE)
    rules = [filters.Rule("m.py", "*_Is_Eq", None, None, r"is\s+None\b", "None is a singleton")]
    col = MODULE.splitlines()[9].index(" is None") + 1
    spec = _spec("m.py", "core/ReplaceComparisonOperator_Is_Eq", 10, col)
    assert filters.equivalent_reason(rules, tmp_path, spec) == "None is a singleton"
    assert filters.equivalent_reason(rules, tmp_path, _spec("m.py", spec.operator_name, 10, 4)) \
        is None


def test_a_simulation_that_hangs_kills_the_mutant_as_a_hang(monkeypatch: Any) -> None:
    """A mutant that live-locks the scheduler (virtual time never advances) is
    stopped by the killer's wall-clock alarm, not by the session's timeout."""
    import time

    from harness.mutation import killer
    from sim import kernel

    def spin(*args: object, **kwargs: object) -> object:
        while True:
            time.sleep(0.01)

    monkeypatch.setattr(kernel, "run_simulation", spin)
    verdict = killer.campaign(["basic"], 3, "swarm", hang_s=0.2)
    assert verdict["killed"] and verdict["invariant"] == "hang" and verdict["seed"] == 1


ROOT = Path(__file__).resolve().parents[2]


def _decorators_of_mutated_modules() -> list[tuple[str, int, int, list[str]]]:
    """(module, line, column of '@', the decorator stack's sources) for every decorator
    in a module some group of ci/mutation.toml mutates, as cosmic-ray positions them."""
    import ast

    from harness.mutation import config

    cfg = config.load(ROOT / "ci/mutation.toml")
    paths = sorted({p for g in cfg.groups for m in g.modules
                    for p in ([ROOT / m] if m.endswith(".py") else (ROOT / m).rglob("*.py"))})
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                stack = [ast.unparse(d) for d in node.decorator_list]
                for d in node.decorator_list:
                    out.append((str(path.relative_to(ROOT)), d.lineno, d.col_offset - 1, stack))
    return out


def test_classmethod_rule_excludes_exactly_the_classmethods_under_pydantic_validators() -> None:
    """Removing `@classmethod` below field_validator/model_validator is equivalent (pydantic
    applies it itself); every other decorator removal stays judged."""
    rules = filters.load_rules(ROOT / "ci/mutation-equivalents.toml")
    excluded, expected = set(), set()
    for module, line, col, stack in _decorators_of_mutated_modules():
        source = filters._source_line(ROOT / module, line).strip()
        reason = filters.equivalent_reason(rules, ROOT, _spec(module, "core/RemoveDecorator",
                                                              line, col))
        if reason is not None:
            excluded.add((module, line))
        if source == "@classmethod" and stack.index("classmethod") > 0 and \
                stack[stack.index("classmethod") - 1].startswith(("field_validator(",
                                                                  "model_validator(")):
            expected.add((module, line))
    assert expected and excluded == expected


def test_pydantic_validators_are_classmethods_with_or_without_the_decorator() -> None:
    from pydantic import BaseModel, field_validator, model_validator

    def build(explicit: bool) -> type[BaseModel]:
        def wrap(f: Any) -> Any:
            return classmethod(f) if explicit else f

        class M(BaseModel):
            x: int

            @model_validator(mode="before")
            @wrap
            def _fill(cls, data: Any) -> Any:
                return {"x": 1, **data} if isinstance(data, dict) and cls is M else data

            @field_validator("x")
            @wrap
            def _pos(cls, value: int) -> int:
                if value < 0 or cls is not M:
                    raise ValueError("negative")
                return value

        return M

    for explicit in (True, False):
        m = build(explicit)
        assert m.model_validate({}).x == 1
        assert m.model_validate({"x": 5}).x == 5
        try:
            m.model_validate({"x": -1})
            raise AssertionError("negative x accepted")
        except ValueError as exc:
            assert "negative" in str(exc)


def test_unfenced_is_the_greatest_late_job_so_gte_means_is() -> None:
    """The debts.py:79 equivalence (`is LateJob.UNFENCED` made `>=`) holds only while
    UNFENCED's value is the greatest of LateJob's string values."""
    from runtime.publish_fence import LateJob

    assert [m for m in LateJob if m >= LateJob.UNFENCED] == [LateJob.UNFENCED]
