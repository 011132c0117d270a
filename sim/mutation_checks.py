"""Invariants of runtime mutation (runtime.mutation.pause_queues).

The `runtime_mutation` scenario's mutator holds `pause_queues` on the live
boot's worker for a while (the "change") and tells the checker when the
change begins and ends, and when a drain gave up. Which hops hold a claim is
observed at the process boundary, never read from the worker: the broker's
call of the hop handler is watched from its start to its return, and the
SimLedger reports the claim that call committed.

- `mutation_quiesced`: the change begins only once no hop of the boot past
  the pre-claim gate (its ledger claim begun, committed or not) is still
  running, and no claim of that boot commits while the change holds.
- `drain_honest`: a drain that gives up does so only while such a hop is
  still running (or ended within the drain's last poll).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from uuid import UUID

import trio

from runtime.mutation import DRAIN_POLL_S

EPS = 1e-6

if TYPE_CHECKING:
    from sim.checker import Checker

INVARIANTS = (
    ("mutation_quiesced", "a runtime mutation applies only once no hop of its process that "
     "began its claim is still running, and no claim of that process commits while the "
     "change holds", "seed 000 'Cancellation, mutation, and recovery'"),
    ("drain_honest", "a runtime mutation's drain times out only while a hop of its process "
     "that began its claim is still running",
     "seed 000 'Cancellation, mutation, and recovery'"),
)


@dataclass(eq=False)
class HopCall:
    boot_id: str
    key: str
    claiming: bool = False
    """Its ledger claim has begun: the hop is past the pre-claim gate."""
    claimed: bool = False
    since: int = 0
    """Trace length when its claim committed (faults after it may excuse a lost Step)."""
    claimed_at: float = 0.0
    touches: list[float] = field(default_factory=list)
    wrote: list[str] = field(default_factory=list)
    """Ledger writes this call made that returned a record (or True): what it achieved."""
    last_answer: dict[str, bool] = field(default_factory=dict)
    """Per write method, whether its latest call returned a record: a write applied by an
    ambiguous commit and refused on its retry reads False here."""
    outcome_known: bool = False
    """Its final node returned (a simulator node marks it: sim.scenarios.publish_bound)."""


CURRENT_HOP: ContextVar[HopCall | None] = ContextVar("sim_hop_call", default=None)


class MutationChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.holding: str | None = None
        """The boot whose worker a change currently holds paused."""
        self.running: set[HopCall] = set()
        self.last_end: dict[str, float] = {}
        """When the boot's last hop past the gate ended."""

    def watch_hop(
        self, boot_id: str, handler: Callable[[UUID, int], Awaitable[object]]
    ) -> Callable[[UUID, int], Awaitable[object]]:
        """`handler` as the broker calls it, each call recorded while it runs."""

        async def hop(run_id: UUID, seq: int) -> object:
            call = HopCall(boot_id, f"run:{run_id}:{seq}")
            token = CURRENT_HOP.set(call)
            self.running.add(call)
            try:
                outcome = await handler(run_id, seq)
            except Exception as exc:
                failure = exc
                self.checker._guarded(lambda: self.checker.hop_checks.raised(call, failure))
                raise
            except BaseException:  # cancelled (an abort, a shutdown)
                self.checker._guarded(lambda: self.checker.hop_checks.cancelled(call))
                raise
            finally:
                self.running.discard(call)
                CURRENT_HOP.reset(token)
                if call.claiming:
                    self.last_end[boot_id] = trio.current_time()
            self.checker._guarded(lambda: self.checker.hop_checks.returned(call, outcome))
            return outcome

        return hop

    def claimed_hops(self, boot_id: str) -> list[str]:
        """Hops of the boot past the pre-claim gate (claiming or claimed) still running."""
        return sorted(c.key for c in self.running if c.boot_id == boot_id and c.claiming)

    def wrote(self, name: str, result: object) -> None:
        call = CURRENT_HOP.get()
        if call is None:
            return
        achieved = result is not None and result is not False
        if achieved:
            call.wrote.append(name)
        call.last_answer[name] = achieved

    def claim_began(self) -> None:
        call = CURRENT_HOP.get()
        if call is not None:
            call.claiming = True

    def claim_committed(self, boot_id: str, key: str) -> None:
        call = CURRENT_HOP.get()
        if call is not None:
            call.claimed = True
            call.since = len(self.checker.world.trace.lines)
            call.claimed_at = trio.current_time()
        if self.holding == boot_id:
            self.checker.fail("mutation_quiesced", f"hop {key} of {boot_id} claimed while a "
                              "mutation held its pre-claim gate closed")

    def change_began(self, boot_id: str) -> None:
        self.holding = boot_id
        held = self.claimed_hops(boot_id)
        if held:
            self.checker.fail("mutation_quiesced", f"a mutation of {boot_id} began while "
                              f"{len(held)} of its hops held claims: {', '.join(held[:3])}")

    def change_ended(self) -> None:
        self.holding = None

    def drain_timed_out(self, boot_id: str) -> None:
        """A drain polls; a hop that ended within its last poll still counts."""
        recent = trio.current_time() - self.last_end.get(boot_id, -1e9) <= DRAIN_POLL_S + EPS
        if not self.claimed_hops(boot_id) and not recent:
            self.checker.fail("drain_honest", f"the drain of {boot_id} timed out with no "
                              "hop of it past the pre-claim gate still running")
