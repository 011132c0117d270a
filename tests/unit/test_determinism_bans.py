"""No wall clock, random ids, global randomness or asyncio in runtime core.

DESIGN section 2: everything nondeterministic reaches the runtime through a
seam (Clock, Entropy) or anyio. This test walks the AST of every module of
`runtime/` except `runtime/adapters/` and reports each banned import or
reference as `file:line: what`. Names are resolved through import aliases,
so `import datetime as dt; dt.datetime.now()` and `from time import sleep`
are caught as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
EXEMPT = RUNTIME / "adapters"

BANNED_MODULES = {
    "random": "the random module (use the Entropy seam)",
    "secrets": "the secrets module (use the Entropy seam)",
    "asyncio": "asyncio (use anyio)",
}
BANNED_NAMES = {
    "datetime.datetime.now": "wall clock (use Clock.now)",
    "datetime.datetime.utcnow": "wall clock (use Clock.now)",
    "datetime.datetime.today": "wall clock (use Clock.now)",
    "datetime.date.today": "wall clock (use Clock.now)",
    "time.time": "wall clock (use Clock)",
    "time.time_ns": "wall clock (use Clock)",
    "time.monotonic": "process clock (use Clock.monotonic)",
    "time.monotonic_ns": "process clock (use Clock.monotonic)",
    "time.perf_counter": "process clock (use Clock.monotonic)",
    "time.perf_counter_ns": "process clock (use Clock.monotonic)",
    "time.sleep": "blocking sleep (use anyio.sleep)",
    "uuid.uuid1": "random/host-derived id (use Entropy.new_id)",
    "uuid.uuid4": "random id (use Entropy.new_id)",
    "os.urandom": "OS randomness (use the Entropy seam)",
    "os.getrandom": "OS randomness (use the Entropy seam)",
}


def _banned_module(dotted: str) -> str | None:
    root = dotted.split(".")[0]
    return BANNED_MODULES.get(root)


def _banned_name(dotted: str) -> str | None:
    if dotted in BANNED_NAMES:
        return BANNED_NAMES[dotted]
    return _banned_module(dotted)


class _Checker(ast.NodeVisitor):
    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.aliases: dict[str, str] = {}  # local name -> fully dotted origin (see check)
        self.problems: list[str] = []

    def _report(self, node: ast.AST, what: str, why: str) -> None:
        self.problems.append(f"{self.filename}:{getattr(node, 'lineno', 0)}: {what} -- {why}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            why = _banned_module(alias.name)
            if why:
                self._report(node, f"import {alias.name}", why)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or node.module is None:
            return  # relative imports stay inside the package
        for alias in node.names:
            dotted = f"{node.module}.{alias.name}"
            why = _banned_name(dotted)
            if why:
                self._report(node, f"from {node.module} import {alias.name}", why)

    def _dotted(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        if dotted and dotted in BANNED_NAMES:
            self._report(node, dotted + ("()" if self._called(node) else ""), BANNED_NAMES[dotted])
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        dotted = self._dotted(node.func)
        if isinstance(node.func, ast.Name) and dotted and _banned_name(dotted):
            self._report(node, f"{node.func.id}() [{dotted}]", _banned_name(dotted) or "")
        elif isinstance(node.func, ast.Attribute) and dotted and dotted not in BANNED_NAMES:
            why = _banned_module(dotted)
            if why:
                self._report(node, f"{dotted}()", why)
        self.generic_visit(node)

    def _called(self, node: ast.AST) -> bool:
        return any(
            isinstance(p, ast.Call) and p.func is node for p in self._parents.get(id(node), [])
        )

    def check(self, tree: ast.AST) -> list[str]:
        self._parents: dict[int, list[ast.AST]] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self._parents.setdefault(id(child), []).append(parent)
        # Aliases first, so a use above a late import is still resolved.
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    if isinstance(node, ast.Import):
                        local = alias.asname or alias.name.split(".")[0]
                        self.aliases[local] = alias.name if alias.asname else local
                    elif node.module and not node.level:
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.visit(tree)
        return sorted(set(self.problems), key=_line_order)


def _line_order(problem: str) -> tuple[str, int, str]:
    path, line, rest = problem.split(":", 2)
    return path, int(line), rest


def banned_uses(source: str, filename: str = "<snippet>") -> list[str]:
    """Every banned import or reference in `source`, as `file:line: what -- why`."""
    return _Checker(filename).check(ast.parse(source, filename=filename))


def core_modules() -> list[Path]:
    return sorted(p for p in RUNTIME.rglob("*.py") if EXEMPT not in p.parents)


def test_runtime_core_uses_no_banned_nondeterminism() -> None:
    modules = core_modules()
    assert RUNTIME / "engine.py" in modules and RUNTIME / "worker.py" in modules
    assert not any(EXEMPT in p.parents for p in modules)
    problems: list[str] = []
    for path in modules:
        rel = path.relative_to(RUNTIME.parent).as_posix()
        problems += banned_uses(path.read_text(encoding="utf-8"), rel)
    assert not problems, "banned nondeterminism in runtime core:\n" + "\n".join(problems)


def test_checker_flags_datetime_now_with_file_and_line() -> None:
    snippet = "from datetime import datetime\n\n\ndef stamp():\n    return datetime.now()\n"
    problems = banned_uses(snippet, "runtime/engine.py")
    assert len(problems) == 1
    assert problems[0].startswith("runtime/engine.py:5: datetime.datetime.now()")


def test_checker_flags_every_banned_form() -> None:
    snippet = "\n".join(
        [
            "import datetime as dt",  # 1
            "import time",  # 2
            "import uuid",  # 3
            "import os",  # 4
            "import random",  # 5
            "import secrets",  # 6
            "import asyncio",  # 7
            "from time import sleep as nap",  # 8
            "from uuid import uuid4",  # 9
            "dt.datetime.utcnow()",  # 10
            "dt.date.today()",  # 11
            "time.time()",  # 12
            "time.monotonic()",  # 13
            "time.perf_counter()",  # 14
            "time.sleep(1)",  # 15
            "uuid.uuid1()",  # 16
            "uuid.uuid4()",  # 17
            "os.urandom(8)",  # 18
            "random.random()",  # 19
            "nap(1)",  # 20
            "asyncio.sleep(0)",  # 21
            "clock = dt.datetime.now",  # 22: a reference is as bad as a call
        ]
    )
    lines = {int(p.split(":")[1]) for p in banned_uses(snippet, "x.py")}
    assert lines == set(range(5, 23))


def test_checker_allows_the_seam_style() -> None:
    snippet = "\n".join(
        [
            "from datetime import UTC, datetime, timedelta",
            "from uuid import NAMESPACE_URL, UUID, uuid5",
            "import anyio",
            "import time as t2",
            "def f(clock):",
            "    x = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=1)",
            "    y = uuid5(NAMESPACE_URL, 'k')",
            "    return clock.now(), anyio.sleep(1), x, y, t2.strftime",
        ]
    )
    assert banned_uses(snippet) == []
