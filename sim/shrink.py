"""Shrinking: the smallest fault plan that still breaks the same invariant.

First drop faults one at a time while the failure persists (repeating until
no single fault can go), then simplify what is left: latencies and delays to
zero, and crashes at virtual times kept as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.clock import held_freeze
from sim.faults.plan import FaultPlan, PlannedFault
from sim.kernel import SimResult, run_simulation


@dataclass
class ShrinkResult:
    original: SimResult
    plan: FaultPlan
    final: SimResult
    attempts: int


def shrink(
    seed: int,
    scenario: str,
    profile: str,
    plan: FaultPlan | None = None,
    *,
    break_name: str | None = None,
    run: Callable[..., SimResult] = run_simulation,
) -> ShrinkResult | None:
    """None when the seed does not fail in the first place."""
    with held_freeze():  # one freezegun start for every attempt, not one per attempt
        return _shrink(seed, scenario, profile, plan, break_name, run)


def _shrink(seed: int, scenario: str, profile: str, plan: FaultPlan | None,
            break_name: str | None, run: Callable[..., SimResult]) -> ShrinkResult | None:
    original = run(seed, scenario, profile, plan, break_name=break_name)
    if original.ok:
        return None
    target = original.invariant
    attempts = 0

    def still_fails(candidate: list[PlannedFault]) -> SimResult | None:
        nonlocal attempts
        attempts += 1
        result = run(seed, scenario, profile, FaultPlan(faults=candidate), break_name=break_name)
        return result if result.invariant == target else None

    faults = list(original.fired.faults if plan is None else plan.faults)
    best = still_fails(faults)
    if best is None:  # the recorded plan does not reproduce on its own; keep the original
        return ShrinkResult(original, FaultPlan(faults=faults), original, attempts)
    changed = True
    while changed:
        changed = False
        for i in range(len(faults)):
            candidate = faults[:i] + faults[i + 1:]
            result = still_fails(candidate)
            if result is not None:
                faults, best, changed = candidate, result, True
                break
    for i, pf in enumerate(faults):
        if pf.amount:
            candidate = [*faults[:i], pf.model_copy(update={"amount": 0.0}), *faults[i + 1:]]
            result = still_fails(candidate)
            if result is not None:
                faults, best = candidate, result
    return ShrinkResult(original, FaultPlan(faults=faults), best, attempts)
