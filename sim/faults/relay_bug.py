"""FaultKind.RELAY_BUG: a maintenance relay pass that raises past its guards.

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery": the
lifespan supervisor restarts a relay that exits before shutdown, with a
deterministic exponential backoff capped at five seconds. Every step of
`Relays.pass_once` isolates its own failures, so no other fault makes the relay
exit; this one stands for a bug of the relay loop itself. The seam is the pass
the relay's own loop (`Relays.run_forever`) starts: the boot's Relays instance
gets a `pass_once` of its own that reports the pass to the checker
(`sim.relay_checks`), rolls the fault and either raises RelayBug or runs the
real pass. A pass started elsewhere (the pause action's fresh copy) is untouched.

Installed only in worlds that may fire the kind (its probability or a plan
entry), so every other world's trace and draws stay as they were.
"""

from __future__ import annotations

import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import trio

from runtime.recovery.relay import Relays
from sim.faults.plan import FaultKind

if TYPE_CHECKING:
    from sim.world import Boot

POINT = "relay.pass"


class RelayBug(Exception):
    """Injected: the relay loop itself failed outside every per-step guard."""


def may_fire(boot: Boot) -> bool:
    injector = boot.world.injector
    if injector.plan is not None:
        return any(pf.fault is FaultKind.RELAY_BUG for pf in injector.plan.faults)
    return injector.options.relay_bug_per_pass > 0


def install(boot: Boot, relays: Relays) -> None:
    """Give this boot's relays the faulty pass, if its world may fire RELAY_BUG."""
    if not may_fire(boot):
        return
    real = relays.pass_once
    loop = Relays.run_forever.__code__
    checks = boot.world.checker.relay_checks

    async def faulty() -> None:
        checks.pass_started(boot.number, relays.every_s)
        pf = boot.world.injector.hit(POINT, (FaultKind.RELAY_BUG,))
        if pf is not None:
            boot.world.trace.emit("faults", "fault.fired", point=POINT, fault=pf.fault,
                                  amount=pf.amount)
            checks.pass_failed(boot.number)
            raise RelayBug(f"injected relay bug in boot {boot.number} at "
                           f"t={trio.current_time():g}")
        await real()

    def pass_once() -> Coroutine[Any, Any, None]:
        caller = sys._getframe(1)
        return faulty() if caller.f_code is loop else real()

    relays.pass_once = pass_once  # type: ignore[method-assign]
