"""`ci/mutation.toml`: the module groups, their focus scenarios and the budgets."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Group:
    """One cosmic-ray session: these modules, killed by these scenarios."""

    name: str
    modules: tuple[str, ...]
    scenarios: tuple[str, ...]


@dataclass(frozen=True)
class Sample:
    size: int
    seed: int
    seeds: int
    min_kill_rate: float


@dataclass(frozen=True)
class MutationConfig:
    profile: str
    seeds: int
    timeout_s: float
    equivalents: Path
    sample: Sample
    groups: tuple[Group, ...]

    def group(self, name: str) -> Group:
        for g in self.groups:
            if g.name == name:
                return g
        raise KeyError(f"unknown group {name!r}; known: {', '.join(g.name for g in self.groups)}")


def load(path: Path) -> MutationConfig:
    """Parse the file; a missing or ill-typed key raises ValueError naming it."""
    data = tomllib.loads(path.read_text())
    try:
        m = data["mutation"]
        s = m["sample"]
        groups = tuple(
            Group(str(g["name"]), tuple(g["modules"]), tuple(g["scenarios"])) for g in m["group"]
        )
        return MutationConfig(
            profile=str(m["profile"]),
            seeds=int(m["seeds"]),
            timeout_s=float(m["timeout_s"]),
            equivalents=Path(m["equivalents"]),
            sample=Sample(int(s["size"]), int(s["seed"]), int(s["seeds"]),
                          float(s["min_kill_rate"])),
            groups=groups,
        )
    except KeyError as exc:
        raise ValueError(f"{path}: missing key {exc.args[0]!r}") from exc
