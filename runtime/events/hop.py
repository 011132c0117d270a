"""HopEvents: the event channel and Step writer of one hop, as perform_run uses them.

Seed 000_81a5c720b14d934a.txt, "Events, settlement, and waits": the hop
publishes its lifecycle on the Run's channel; non-token events are teed to
Step rows in order. Terminal truth commits first; then the terminal event
is published, the writer chain is flushed (a failed append becomes evidence
debt, repaired later, and never changes Run truth), and the channel closes.
A parked hop flushes too and leaves its channel open for readers, with no
writer attached.

Terminal truth and its Steps in one transaction (issue 17): the hop's writer
lingers before an append nobody waits for, so a short hop's
lifecycle Steps are usually still queued when it settles
(`Deps.step_linger_s`). Before settling,
`fold_terminal` waits (at most FOLD_WAIT_S) until no append is in flight;
when nothing is latched it takes the queued Steps, detaches the writer and
hands them with the terminal Step to `settle_run`, which writes them all
with the settlement, behind every Step already written. The terminal event
then goes to live readers only. A settlement that did not apply gives the
lifecycle Steps back to the writer (`unfold`), which writes them as before.
Otherwise (a failed or stalled chain, a repair) the hop settles alone and
the terminal Step follows through the writer as before, a debt until it
lands. Either way a Step failure never touches Run truth: folded Steps are
written only inside a settlement that applies, an unfolded terminal one only
after it committed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import anyio

from runtime.events.bus import EventBus
from runtime.events.channel import RunChannel
from runtime.events.errors import EventError, StepWriteFailed, StepWriterClosed
from runtime.events.model import EventKind
from runtime.events.writer import StepWriter
from runtime.models import Run, RunStatus, Settlement
from runtime.seams import Deps

log = logging.getLogger(__name__)

PUBLISH_BOUND_S = 5.0
FOLD_WAIT_S = 1.0
"""How long a settling hop waits for its Step writer before it settles without
folding its terminal Step in (truth is never held back longer than this)."""

TERMINAL_KINDS = {
    RunStatus.DONE: EventKind.RUN_DONE,
    RunStatus.FAILED: EventKind.RUN_FAILED,
    RunStatus.CANCELLED: EventKind.RUN_CANCELLED,
}


def run_record(run: Run) -> dict[str, Any]:
    return run.model_dump(mode="json", include={"id", "status", "seq", "result", "error"})


class HopEvents:
    def __init__(self, deps: Deps, bus: EventBus, run: Run, seq: int) -> None:
        self.deps = deps
        self.bus = bus
        self.run = run
        self.writer = StepWriter(deps.ledger, deps.clock, run.id, seq,
                                 linger_s=deps.step_linger_s)
        self.channel: RunChannel | None = None
        self.debt = False
        self.folded = False
        """The terminal Step rides in settle_run's transaction (fold_terminal)."""
        self._taken: list[tuple[str, dict[str, Any]]] = []

    async def __aenter__(self) -> Self:
        await self.writer.__aenter__()
        self.channel = self.bus.open(self.run.id, lambda: run_record(self.run), sink=self.writer)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.channel is not None and not self.channel.closed:
            self.channel.detach(self.writer)
        await self.writer.__aexit__(exc_type, exc, tb)

    def track(self, run: Run) -> None:
        """The authoritative record a resync snapshot shows."""
        self.run = run

    async def publish(self, kind: str, data: Mapping[str, Any] | None = None) -> bool:
        """Best effort and bounded: shielded so a cancellation arriving as a node
        returns cannot lose the node's outcome, and never longer than PUBLISH_BOUND_S.
        True when the event was accepted."""
        if self.channel is None:
            return False
        with anyio.move_on_after(PUBLISH_BOUND_S, shield=True) as scope:
            try:
                await self.channel.publish(kind, data)
                return True
            except EventError as exc:  # evidence is best effort; it never fails the hop
                log.warning("event %s of Run %s not published: %s", kind, self.run.id, exc)
        if scope.cancelled_caught:
            log.warning("event %s of Run %s not published within %ss", kind, self.run.id,
                        PUBLISH_BOUND_S)
        return False

    async def fold_terminal(
        self, settlement: Settlement
    ) -> tuple[tuple[str, dict[str, Any]], list[tuple[str, dict[str, Any]]]] | None:
        """Before settle_run: the terminal Step (kind, data) and the lifecycle Steps
        queued ahead of it, for the settlement's own transaction; or None when the
        hop settles alone. Folds only once no append is in flight (a writer that
        does not linger: once every Step is written), waiting at most FOLD_WAIT_S,
        and nothing is latched; the writer is then detached with no
        await in between, so no later event can be teed ahead of or behind them."""
        kind = TERMINAL_KINDS.get(settlement.status)
        if kind is None or self.channel is None or self.channel.closed:
            return None
        with anyio.move_on_after(FOLD_WAIT_S):
            try:
                if self.writer.lingers:
                    await self.writer.wait_idle()  # what it holds rides in the settlement
                else:
                    await self.writer.barrier()  # a writer that never holds writes it all
            except (StepWriteFailed, StepWriterClosed):
                return None  # settled alone: the terminal path owes and repairs it
        taken = self.writer.take_pending()
        if taken is None:
            return None
        self.channel.detach(self.writer)
        self.folded = True
        self._taken = taken
        return (kind, {"error": settlement.error}), taken

    def unfold(self) -> None:
        """The folded settlement did not apply (fenced) or did not answer: the
        lifecycle Steps go back to the writer, which writes them as it would have
        (after an ambiguous commit the ledger refuses them behind the terminal
        Step, which closes the log)."""
        if self._taken and not self.writer.restore(self._taken):
            log.warning("Steps of Run %s not written: the writer stopped", self.run.id)
        self._taken = []

    async def terminal(self, run: Run) -> None:
        """After terminal truth committed: terminal event, flush, close.

        The terminal Step is owed (`debt`) from the moment truth committed
        until the flush proves it written, so a hop cancelled in between (its
        broker job swept or aborted, a shutdown) still leaves the debt to the
        relay, whose repair reads the durable Steps first and never writes
        it twice."""
        self.track(run)
        self.debt = not self.folded  # folded: written with truth, never owed
        published = await self.publish(TERMINAL_KINDS[run.status], {"error": run.error})
        if not self.folded:
            self.debt = not (await self._flush() and published)
        await self.bus.close(run.id)

    async def parked(self, status: RunStatus) -> None:
        await self.publish(EventKind.RUN_PARKED, {"status": status.value})
        await self._flush()

    async def _flush(self) -> bool:
        """Wait for the writer chain; False when a Step failed. Only a terminal hop's
        failure becomes a debt: the terminal Step is the evidence that is repaired;
        lifecycle Steps are best effort."""
        try:
            await self.writer.barrier()
        except StepWriteFailed as exc:
            log.warning("Steps of Run %s not all written: %s", self.run.id, exc)
            return False
        return True
