"""The catalogue of numbered SQL migrations shipped with the code.

Files are `migrations/NNNN_name.sql`, numbered 1, 2, 3... without gaps. A
header line `-- requires: <condition>` declares a precondition the runner
checks inside the migration's own transaction. The one condition known today
is `no-nonterminal-runs`: the seed 000_81a5c720b14d934a.txt ("Admission and
exact claim") forbids installing or removing the delivery outbox while any
legacy Run is still live, because old rows cannot say whether their current
hop was fresh or resumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from runtime.adapters.postgres.errors import InvalidMigrations

NO_NONTERMINAL_RUNS = "no-nonterminal-runs"
KNOWN_REQUIREMENTS = frozenset({NO_NONTERMINAL_RUNS})

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_REQUIRES = re.compile(r"^--\s*requires:\s*(.+?)\s*$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str
    requires: frozenset[str]


def parse_requires(sql: str) -> frozenset[str]:
    """Conditions named in the leading comment block of a migration."""
    found: set[str] = set()
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("--"):
            break
        match = _REQUIRES.match(stripped)
        if match:
            found.update(part.strip() for part in match.group(1).split(",") if part.strip())
    return frozenset(found)


def build(files: dict[str, str]) -> tuple[Migration, ...]:
    """Validate `{file name: sql}` into an ordered, gapless tuple of migrations."""
    loaded: list[Migration] = []
    for file_name in sorted(files):
        match = _FILE.match(file_name)
        if match is None:
            raise InvalidMigrations(f"migration file {file_name!r} is not named NNNN_name.sql")
        sql = files[file_name]
        requires = parse_requires(sql)
        unknown = sorted(requires - KNOWN_REQUIREMENTS)
        if unknown:
            raise InvalidMigrations(f"migration {file_name} requires unknown conditions {unknown}")
        loaded.append(Migration(int(match.group(1)), match.group(2), sql, requires))
    for expected, migration in enumerate(loaded, start=1):
        if migration.version != expected:
            raise InvalidMigrations(
                f"migrations must be numbered 1..N without gaps: expected {expected:04d}, "
                f"found {migration.version:04d}_{migration.name}"
            )
    return tuple(loaded)


@cache
def shipped() -> tuple[Migration, ...]:
    """The migrations in this package's `migrations/` directory."""
    folder = resources.files(__package__ or "runtime.adapters.postgres") / "migrations"
    files = {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    }
    return build(files)


def latest_version() -> int:
    migrations = shipped()
    return migrations[-1].version if migrations else 0
