"""perform_run: one hop of a Run, from exact claim to fenced settlement.

Seed 000_81a5c720b14d934a.txt, "Admission and exact claim": the hop waits at
the global pre-claim gate, claims only a QUEUED Run at exactly its delivery
sequence (a stale or duplicate delivery is skipped), verifies the pinned
Pattern, runs its nodes, and settles terminal truth fenced by the claimed
sequence under a shielded scope. A live hop touches its broker job every
30 s so an abandoned job is swept after its 120 s heartbeat.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar
from uuid import UUID

import anyio

from runtime import faults
from runtime.events.bus import EventBus
from runtime.events.hop import HopEvents
from runtime.events.model import EventKind
from runtime.graph.runner import GraphRunner
from runtime.hop import HopContext, Stasis
from runtime.keys import hop_key
from runtime.models import ResumeMode, Run, RunDelivery, RunStatus, Settlement
from runtime.registry import QUEUES, WorkflowRegistry
from runtime.retry import retrying
from runtime.seams import Deps
from runtime.stasis.waits import Parked

log = logging.getLogger(__name__)
T = TypeVar("T")

TOUCH_EVERY_S = 30
PINNED_PATTERN_UNAVAILABLE = "pinned Pattern unavailable"


class HopOutcome(enum.StrEnum):
    SKIPPED = "skipped"
    SETTLED = "settled"
    PARKED = "parked"
    FENCED = "fenced"


class ClaimGate:
    """The global pre-claim gate. Closed, a dequeued hop waits before claiming."""

    def __init__(self) -> None:
        self._open = anyio.Event()
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def close(self) -> None:
        if self._open.is_set():
            self._open = anyio.Event()

    def open(self) -> None:
        self._open.set()

    async def wait_open(self) -> None:
        while not self._open.is_set():
            await self._open.wait()


@dataclass
class Worker:
    """Executes hops for one process incarnation."""

    deps: Deps
    registry: WorkflowRegistry
    gate: ClaimGate = field(default_factory=ClaimGate)
    bus: EventBus = field(default_factory=EventBus)
    evidence_debt: dict[UUID, int] = field(default_factory=dict)
    """Runs whose terminal Steps did not all land in this process: repaired by the relay."""
    in_flight: int = 0
    """Hops past the pre-claim gate and not yet finished with their evidence. A
    hop counts from before its claim: a claim still in flight (a slow commit, a
    retried blip) may commit at any moment, so a drain must wait for it too."""
    live_claims: set[str] = field(default_factory=set)
    """Claim tokens of the hops this process is still running: a claim of this
    boot whose token is not here belongs to a hop that is gone (the relay's
    same-boot recovery, runtime.recovery.orphans)."""

    async def perform_run(self, run_id: UUID, seq: int) -> HopOutcome:
        await self.gate.wait_open()
        token = str(self.deps.entropy.new_id())
        self.live_claims.add(token)  # before the claim commits: never a gap the relay sees
        self.in_flight += 1
        try:
            return await self._claim_and_hop(run_id, seq, token)
        finally:
            self.in_flight -= 1
            self.live_claims.discard(token)

    async def _claim_and_hop(self, run_id: UUID, seq: int, token: str) -> HopOutcome:
        ledger, clock = self.deps.ledger, self.deps.clock
        claim = await self._ledger(
            lambda: ledger.claim_delivery(run_id, seq, self.deps.boot_id, token, clock.now())
        )
        if not claim.claimed or claim.run is None:
            return HopOutcome.SKIPPED
        await self.deps.faults.point(faults.CLAIM_COMMITTED, run_id=run_id, seq=seq)
        events = HopEvents(self.deps, self.bus, claim.run, seq)
        try:
            async with events:
                await events.publish(EventKind.RUN_CLAIMED, {"seq": seq})
                result = await self._hop(claim.run, claim.delivery, events)
        finally:
            if events.debt:  # also when the hop is cancelled after terminal truth
                self.evidence_debt[run_id] = seq
        return result

    async def _hop(self, run: Run, delivery: RunDelivery | None, events: HopEvents) -> HopOutcome:
        ledger, clock = self.deps.ledger, self.deps.clock
        run_id, seq = run.id, run.seq
        outcome: list[Settlement | Parked] = []
        stasis = Stasis()
        try:
            await self._execute(run, delivery, outcome, events, stasis)
        finally:
            # Once the nodes have produced an outcome it is settled even if the
            # hop is cancelled now (for instance while the touch task group
            # unwinds): the cancellation still propagates afterwards.
            settled = None
            if outcome and isinstance(outcome[0], Settlement):
                settlement = outcome[0]
                with anyio.CancelScope(shield=True):
                    folded = await events.fold_terminal(settlement)
                    step, before = folded if folded is not None else (None, [])
                    try:
                        settled = await self._ledger(
                            lambda: ledger.settle_run(
                                run_id, seq, settlement, clock.now(), step, before
                            )
                        )
                    finally:
                        if settled is None:
                            events.unfold()
        if outcome and isinstance(outcome[0], Parked):
            parked = outcome[0]
            if parked.status is not None:
                await events.parked(parked.status)
            return HopOutcome.FENCED if parked.fenced else HopOutcome.PARKED
        if settled is None:
            return HopOutcome.FENCED
        # Terminal truth stands: its Step is owed until terminal() lands it, unless
        # settle_run wrote it in the same transaction (events.folded).
        events.debt = not events.folded
        await self.deps.faults.point(faults.SETTLE_TERMINAL_COMMITTED, run_id=run_id, seq=seq)
        await events.terminal(settled)
        await self.deps.faults.point(faults.SETTLE_EVIDENCE_WRITTEN, run_id=run_id, seq=seq)
        if _may_hold_checkpoint(delivery, stasis):
            await self._cleanup(run_id)
        return HopOutcome.SETTLED

    async def _execute(
        self,
        run: Run,
        delivery: RunDelivery | None,
        outcome: list[Settlement | Parked],
        events: HopEvents,
        stasis: Stasis,
    ) -> None:
        """Run one hop of the pinned Pattern; append its outcome as soon as it is known."""
        pattern = self.registry.pinned(run.pattern, run.pattern_version)
        if pattern is None or delivery is None:
            outcome.append(Settlement(status=RunStatus.FAILED, error=PINNED_PATTERN_UNAVAILABLE))
            return
        ctx = HopContext(self.deps, run, delivery.seq, events=events, stasis=stasis)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._touch, hop_key(run.id, delivery.seq))
            try:
                outcome.append(await GraphRunner(ctx, pattern).run(delivery))
            except Exception as exc:
                outcome.append(
                    Settlement(status=RunStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
                )
            tg.cancel_scope.cancel()

    async def _cleanup(self, run_id: UUID) -> None:
        """Best-effort stasis deletion, only after terminal truth committed."""
        try:
            await self.deps.ledger.delete_checkpoint(run_id)
        except Exception as exc:  # startup's cleanup paging retries it
            log.warning("checkpoint of %s not deleted: %s", run_id, exc)

    async def _touch(self, key: str) -> None:
        while True:
            await anyio.sleep(TOUCH_EVERY_S)
            try:
                await self.deps.broker.touch(key)
            except Exception as exc:  # a missed touch is retried next period
                log.warning("touch of %s failed: %s", key, exc)

    async def _ledger(self, op: Callable[[], Awaitable[T]]) -> T:
        return await retrying(self.deps.entropy, op)


def _may_hold_checkpoint(delivery: RunDelivery | None, stasis: Stasis) -> bool:
    """Whether the Run may hold a checkpoint when this hop settles. A checkpoint is
    written only by a hop, and a Run that has one is only ever handed on as a resume
    hop (readmission after a wait); so a fresh hop that never tried to save one
    leaves nothing to delete, and the worker skips the deletion's round trip
    (issue 17). Startup's cleanup paging still covers every other Run."""
    return delivery is None or delivery.mode is not ResumeMode.FRESH or stasis.saving


@dataclass
class Lanes:
    """The two in-process delivery lanes, `runs` and `rites`, each bounded."""

    worker: Worker
    concurrency: dict[str, int] = field(default_factory=lambda: {"runs": 4, "rites": 2})

    async def serve(self) -> None:
        broker = self.worker.deps.broker
        async with anyio.create_task_group() as tg:
            for queue in QUEUES:
                tg.start_soon(
                    partial(broker.serve, boot_id=self.worker.deps.boot_id),
                    queue, self.worker.perform_run, self.concurrency.get(queue, 1),
                )
