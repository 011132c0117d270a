"""Catalogue consistency, both ways: every fault point the runtime calls is
catalogued, and every catalogued point is called somewhere in runtime/."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from runtime import faults

RUNTIME = Path(__file__).resolve().parent.parent / "runtime"


@dataclass(frozen=True)
class CatalogueReport:
    called: dict[str, list[str]]
    """point name -> file:line of each call site"""
    missing: list[str]
    """called in code but not catalogued"""
    unused: list[str]
    """catalogued but never called"""

    @property
    def consistent(self) -> bool:
        return not self.missing and not self.unused


def _point_name(node: ast.Call) -> str | None:
    if not (isinstance(node.func, ast.Attribute) and node.func.attr == "point" and node.args):
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) \
            and arg.value.id == "faults":
        value = getattr(faults, arg.attr, None)
        return value if isinstance(value, str) else f"faults.{arg.attr}"
    return None


def check(root: Path = RUNTIME) -> CatalogueReport:
    called: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _point_name(node)
                if name is not None:
                    where = f"{path.relative_to(root.parent)}:{node.lineno}"
                    called.setdefault(name, []).append(where)
    missing = sorted(n for n in called if n not in faults.CATALOGUE)
    unused = sorted(n for n in faults.CATALOGUE if n not in called)
    return CatalogueReport(called=dict(sorted(called.items())), missing=missing, unused=unused)


def code_digest(root: Path = RUNTIME) -> str:
    """SHA-256 over the runtime's source files: what a restart receipt proved."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".sql"):
            h.update(str(path.relative_to(root)).encode())
            h.update(b"\0")
            h.update(path.read_bytes())
    return h.hexdigest()
