"""Scenario registry: named workloads of external actors."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.faults.options import FaultOptions
    from sim.world import World


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    drive: Callable[[World], Awaitable[None]]
    """The workload phase, while faults are on."""
    heal: Callable[[World], Awaitable[None]]
    """After faults are off: finish what the actors still owe (retries, verdicts)."""
    tune: Callable[[FaultOptions], FaultOptions] | None = None
    """Adjust the profile's options for this scenario (say, many more crashes)."""
    vessel: bool = True
    """Whether the world boots Vessel incarnations. Scenarios of standalone worker
    processes (leased jobs, service attempts) run their own processes instead."""
    quarantined: str | None = None
    """Why this scenario is left out of `all`: a liveness gap it exposes that is
    known and not yet fixed. It still runs by name (replays, breaks, the rules)."""
    setup: Callable[[World], None] | None = None
    """Called once the world is built, before its first boot: an application under
    test (harness.api) installs its registry, its external systems and its checks."""


SCENARIOS: dict[str, Scenario] = {}


def register(scenario: Scenario) -> Scenario:
    SCENARIOS[scenario.name] = scenario
    return scenario


def resolve(spec: str) -> list[Scenario]:
    """`name`, `a,b,c` or `all` -> scenarios; KeyError names the unknown one."""
    _load_builtin()
    if spec == "all":
        return [SCENARIOS[n] for n in sorted(SCENARIOS) if SCENARIOS[n].quarantined is None]
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise KeyError("no scenario named")
    for n in names:
        if n not in SCENARIOS:
            raise KeyError(f"unknown scenario {n!r}; known: {', '.join(sorted(SCENARIOS))}")
    return [SCENARIOS[n] for n in names]


def _load_builtin() -> None:
    from sim.scenarios import (  # noqa: F401
        admission,
        ambiguous_closes,
        bad_input,
        basic,
        events,
        lapsed_lease,
        late_transmission,
        leased_jobs,
        long_stream,
        mutations,
        publish_bound,
        restarts,
        resubmit_race,
        service,
        session_race,
        step_burst,
        upgrade,
        waits,
        withdrawn_jobs,
        zombies,
    )
