"""Assertions for application code and checks: `always`, `sometimes`, `unreachable`.

Inside a simulation each one reports to that world's checker: a false
`always` or a reached `unreachable` is a violation named after the assertion
(the simulation stops, the seed fails with a replay command); a `sometimes`
records whether it was ever seen true, and a campaign reports every
`sometimes` that no seed saw true (a property the workload never exercised, as
Antithesis' and FoundationDB's probes do). Outside a simulation they only
return their condition, so they may stay in production node code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.checker import Checker


@dataclass
class Probes:
    """The assertions one simulation saw: what `simulate` reports in its result."""

    checker: Checker | None = field(default=None, repr=False)
    sometimes: dict[str, bool] = field(default_factory=dict)
    """Each `sometimes` reached, by name: whether it was ever true."""
    always: dict[str, int] = field(default_factory=dict)
    """Each `always` reached, by name: how many times it was evaluated."""

    def violate(self, name: str, rule: str, message: str, **details: Any) -> None:
        from sim.checker import Invariant

        if self.checker is None:
            return
        self.checker.app_invariants.setdefault(name, Invariant(name, rule, "application"))
        self.checker.report(name, message, **{k: _plain(v) for k, v in details.items()})


_active: Probes | None = None


def activate(probes: Probes | None) -> None:
    """Route assertions to `probes` (one simulation), or nowhere (None)."""
    global _active
    _active = probes


def active() -> Probes | None:
    return _active


def always(cond: object, name: str, **details: Any) -> bool:
    """Assert `cond` holds every time this line runs; a violation named `name` if not.

    `details` (JSON-able values) are kept with the violation. Returns `cond` as a bool.
    """
    ok = bool(cond)
    probes = _active
    if probes is not None:
        probes.always[name] = probes.always.get(name, 0) + 1
        if not ok:
            probes.violate(name, f"always({name})", f"always({name}) was false", **details)
    return ok


def sometimes(cond: object, name: str) -> bool:
    """Declare that `cond` should be true at least once across a campaign.

    Never a violation in one simulation; a campaign lists every `sometimes` that
    was reached but never true. Returns `cond` as a bool.
    """
    ok = bool(cond)
    probes = _active
    if probes is not None:
        probes.sometimes[name] = probes.sometimes.get(name, False) or ok
    return ok


def unreachable(name: str, **details: Any) -> None:
    """Mark a line that must never run: reaching it is a violation named `name`."""
    probes = _active
    if probes is not None:
        probes.violate(name, f"unreachable({name})", f"unreachable({name}) was reached",
                       **details)


def _plain(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
