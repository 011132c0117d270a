"""Invariant of the relay supervisor: a relay that exits is restarted on its backoff.

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery": the
lifespan supervisor restarts any relay that exits before shutdown with a
deterministic exponential backoff capped at five seconds (DESIGN.md: 0.1 s
after the first failure, doubling, at most 5 s). The injected RELAY_BUG
(`sim.faults.relay_bug`) is the only thing that makes a boot's relay exit, and
it reports each pass its loop starts and each pass that failed. After a boot's
n-th failure its relay must start its next pass exactly backoff(n) plus one relay
interval later (the restarted loop sleeps its interval first), and must start it
at all if the boot serves that long (liveness). The checker keeps its own copy
of the schedule; it reads virtual time only, no await and no draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from sim.checker import Checker

BACKOFF_BASE_S = 0.1
BACKOFF_CAP_S = 5.0
"""The checker's copy of the supervisor's schedule (runtime.recovery.supervisor)."""
EPS = 1e-6

INVARIANTS = (
    ("relay_restarted_on_backoff", "a maintenance relay that exits before shutdown is "
     "restarted by the lifespan supervisor: after the n-th failure of a boot's relay its "
     "next pass starts exactly min(5 s, 0.1 s * 2**(n-1)) plus one relay interval later, "
     "and it starts at all while the boot serves that long",
     "seed 000 'Cancellation, mutation, and recovery' (the lifespan supervisor restarts "
     "any relay that exits before shutdown with deterministic exponential backoff capped "
     "at five seconds)"),
)


def expected_backoff(failures: int) -> float:
    return float(min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** (failures - 1)))


@dataclass
class Supervised:
    """One boot's relay, as the fault seam reported it."""

    every_s: float = 0.0
    failures: int = 0
    due: float | None = None
    """When the pass after the last failure must start; None once it started."""


class RelayChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.boots: dict[int, Supervised] = {}

    def pass_started(self, boot: int, every_s: float) -> None:
        relay = self.boots.setdefault(boot, Supervised())
        relay.every_s = every_s
        due, relay.due = relay.due, None
        now = trio.current_time()
        if due is not None and abs(now - due) > EPS:
            self.checker._guarded(lambda: self._fail(
                boot, f"boot {boot}'s relay starts its pass {now - due + self._delay(relay):.6g} "
                f"s after its failure {relay.failures}, not "
                f"{self._delay(relay):.6g} s (backoff {expected_backoff(relay.failures):g} s "
                f"then the {relay.every_s:g} s interval)"))

    def pass_failed(self, boot: int) -> None:
        relay = self.boots.setdefault(boot, Supervised())
        relay.failures += 1
        relay.due = trio.current_time() + self._delay(relay)

    def boot_ended(self, boot: int) -> None:
        """The boot crashed or began to stop: a restart due before then is owed."""
        relay = self.boots.get(boot)
        if relay is None or relay.due is None:
            return
        due, relay.due = relay.due, None
        now = trio.current_time()
        if now > due + EPS:
            self.checker._guarded(lambda: self._fail(
                boot, f"boot {boot}'s relay failed (failure {relay.failures}) and was not "
                f"restarted: no pass by t={now:g}, due at t={due:g}"))

    def final(self) -> None:
        for boot in sorted(self.boots):
            self.boot_ended(boot)

    @staticmethod
    def _delay(relay: Supervised) -> float:
        return expected_backoff(relay.failures) + relay.every_s

    def _fail(self, boot: int, message: str) -> None:
        self.checker.fail("relay_restarted_on_backoff", message, boot=boot)
