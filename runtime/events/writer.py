"""StepWriter: the ordered asynchronous tee from a Run's channel to its Step rows.

Seed 000_81a5c720b14d934a.txt, "Events, settlement, and waits", in our words:

* Non-token events become Step rows through `Ledger.append_step`, strictly
  in publish order, by one writer task per Run; at most one append is in
  flight. Token deltas (and resync boundaries) are live-only and never
  written.
* The writer's queue is bounded (`WRITER_QUEUE_LIMIT`): when it is full,
  `write` (and so `RunChannel.publish`) waits. A slow `append_step` only
  delays the chain; nothing is dropped while the chain is healthy.
* Terminal paths `await barrier()`: it returns once every Step accepted so
  far in the current writer generation is written, so recovery never
  reports completion while the terminal Step is merely scheduled.
* A failed append latches its failure on the writer generation: the rest of
  that generation is not written (a later Step must never land ahead of a
  missing one), and every barrier of that generation raises
  `StepWriteFailed` carrying the same original error. This is evidence,
  durable best effort: it never rolls back Run truth that already
  committed, and no append is retried automatically (an append that failed
  after committing would otherwise be written twice).
* `repair(kind, data)` is the explicit, single-flight retry: it lets the
  current generation settle, starts a fresh generation, reads the Run's
  durable Steps (the ledger's sequence is the truth it reseeds from), and
  appends the missing Step exactly once unless an earlier ambiguous append
  already landed it. Its own failure latches on the fresh generation.
* Metadata is deep-copied when accepted, so nothing a publisher or reader
  does later changes what is persisted.

Group commit: when the ledger offers `append_steps` (`StepBatchLedger`),
the one append in flight carries every Step already queued in the same
generation, up to `GROUP_COMMIT_LIMIT`, in publish order and all or none
(a repair is always alone in its append). Nothing waits for time to fill
a group: before taking one the writer yields a few scheduler turns while
they still add Steps, so the order, the one-in-flight rule, the barrier
and the latch are the same as one append per Step; a failed group latches
with the kind of its first Step, the earliest one that may be missing.

Lingering (issue 17, M14): a hop's writer (`linger_s` > 0) holds a group it
could start for at most `linger_s` while nobody waits on it, so a short hop's
lifecycle Steps are still queued when it settles: `take_pending` then hands
them, with no append in flight, to settle_run, which writes them ahead of the
terminal Step in the settlement's transaction. A barrier, a repair, a full
group or queue, and closing end the linger at once; `restore` gives taken
Steps back when the settlement did not apply. The order (every Step after
the ones written, ahead of none), the one-in-flight rule and the latch hold
as before; the only change is that a lifecycle Step may become durable up to
`linger_s` later (it is live on the channel at once).

The simulator stalls the writer or fails an append with a fault-injecting
proxy around the Ledger seam; the writer only needs the two Step methods
(`StepLedger`).
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable
from uuid import UUID

import anyio
import anyio.abc
import anyio.lowlevel

from runtime.events._signal import Signal
from runtime.events.errors import StepWriteFailed, StepWriterClosed
from runtime.events.model import Event, detach
from runtime.models import Step
from runtime.seams import Clock

WRITER_QUEUE_LIMIT = 256
"""Steps accepted but not yet handed to the ledger, per writer."""

GROUP_COMMIT_LIMIT = 64
"""At most this many Steps in one group commit."""

GROUP_FILL_TURNS = 8
"""At most this many scheduler turns spent letting a group fill."""

StepItem = tuple[str, dict[str, Any]]


class StepLedger(Protocol):
    """The part of the Ledger seam the writer uses."""

    async def append_step(
        self, run_id: UUID, seq: int, kind: str, data: dict[str, Any], now: datetime
    ) -> Step: ...

    async def steps(self, run_id: UUID) -> list[Step]: ...


@runtime_checkable
class StepBatchLedger(Protocol):
    """A ledger that can write several Steps of one Run in one transaction."""

    async def append_steps(
        self, run_id: UUID, seq: int, items: Sequence[tuple[str, dict[str, Any]]], now: datetime
    ) -> list[Step]: ...


@dataclass
class _Generation:
    number: int
    accepted: int = 0
    settled: int = 0
    written: int = 0
    dropped: int = 0
    failed_kind: str | None = None
    error: Exception | None = None


@dataclass
class _Repair:
    kind: str
    data: dict[str, Any]
    generation: _Generation | None = None
    step: Step | None = None
    done: bool = False
    abandoned: bool = False


@dataclass
class _Item:
    generation: _Generation
    kind: str
    data: dict[str, Any]
    repair: _Repair | None = field(default=None)


class StepWriter:
    """The Step writer of one Run's hop: `async with StepWriter(...) as writer:`.

    Entering starts the one writer task; leaving normally writes what is
    still queued and then stops (bound it with the caller's own timeout if
    the ledger may stall); leaving with an exception cancels the task.
    """

    def __init__(
        self,
        ledger: StepLedger,
        clock: Clock,
        run_id: UUID,
        seq: int,
        *,
        capacity: int = WRITER_QUEUE_LIMIT,
        linger_s: float = 0.0,
    ) -> None:
        if capacity < 1:
            raise ValueError("writer capacity must be positive")
        if linger_s < 0:
            raise ValueError("writer linger must not be negative")
        self._linger_s = linger_s
        self._busy = False  # a group is handed to the ledger and not yet settled
        self._waiters = 0  # barriers waiting: they end a linger
        self._ledger = ledger
        self._batch = ledger if isinstance(ledger, StepBatchLedger) else None
        self._clock = clock
        self.run_id = run_id
        self.seq = seq
        self._capacity = capacity
        self._queue: deque[_Item] = deque(maxlen=capacity)
        self._gen = _Generation(1)
        self._repair: _Repair | None = None
        self._entered = False
        self._closing = False
        self._stopped = False
        self._task_group: anyio.abc.TaskGroup | None = None
        self._work = Signal()  # the writer task waits for items
        self._room = Signal()  # writers wait for queue space
        self._changed = Signal()  # barrier and repair waiters

    # -- state ----------------------------------------------------------------

    @property
    def generation(self) -> int:
        """Number of the current writer generation (the first is 1)."""
        return self._gen.number

    @property
    def failure(self) -> StepWriteFailed | None:
        """The current generation's latched failure, if any."""
        return self._failed(self._gen) if self._gen.error is not None else None

    @property
    def running(self) -> bool:
        return self._entered and not self._closing and not self._stopped

    @property
    def quiescent(self) -> bool:
        """Running, nothing latched, and every Step accepted so far written: a Step
        written elsewhere now (settle_run's terminal one, issue 17) lands after all
        of them and ahead of none."""
        gen = self._gen
        return (self.running and gen.error is None and self._repair is None
                and not self._queue and not self._busy and gen.settled == gen.accepted)

    @property
    def lingers(self) -> bool:
        """The writer holds an append nobody waits for (linger_s > 0)."""
        return self._linger_s > 0

    @property
    def pending(self) -> int:
        """Steps accepted and not yet handed to the ledger."""
        return len(self._queue)

    # -- lifetime -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("a StepWriter runs once; make a new one")
        self._entered = True
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        task_group.start_soon(self._run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task_group is not None
        self._closing = True
        self._work.notify()
        if exc_type is not None:
            self._task_group.cancel_scope.cancel()
        # The body's own exception is not the writer task's business: it propagates
        # unchanged (not wrapped in an exception group) once the writer task has ended.
        # An exception of the writer task itself (a crash) does surface here, grouped.
        await self._task_group.__aexit__(None, None, None)

    async def _run(self) -> None:
        try:
            while True:
                while not self._queue:
                    if self._closing:
                        return
                    await self._work.wait()
                await self._linger()
                await self._let_group_fill()
                if not self._queue:
                    continue  # taken meanwhile (take_pending): nothing left to write
                group = self._take_group()
                self._room.notify()
                self._busy = True
                try:
                    if len(group) == 1:
                        await self._process(group[0])
                    else:
                        await self._process_group(group)
                finally:
                    self._busy = False
                    self._changed.notify()
        finally:
            self._stopped = True
            self._queue.clear()
            self._room.notify()
            self._changed.notify()

    def _hurried(self) -> bool:
        queued = len(self._queue)
        return (self._closing or self._waiters > 0 or self._repair is not None
                or queued >= GROUP_COMMIT_LIMIT or queued >= self._capacity)

    async def _linger(self) -> None:
        """Hold the next group at most linger_s while nobody needs it written yet."""
        if self._linger_s <= 0:
            return
        with anyio.move_on_after(self._linger_s):
            while self._queue and not self._hurried():
                await self._work.wait()

    async def _let_group_fill(self) -> None:
        """With a batching ledger, yield scheduler turns (never time) while each
        turn still adds Steps, at most GROUP_FILL_TURNS: the publisher that woke
        us usually queues more before it blocks on anything."""
        if self._batch is None:
            return
        for _ in range(GROUP_FILL_TURNS):
            queued = len(self._queue)
            await anyio.lowlevel.cancel_shielded_checkpoint()
            if len(self._queue) == queued or len(self._queue) >= GROUP_COMMIT_LIMIT:
                return

    def _take_group(self) -> list[_Item]:
        """The next item, and with a batching ledger every queued item that may share
        its append: same generation, no repair, at most GROUP_COMMIT_LIMIT."""
        first = self._queue.popleft()
        group = [first]
        if first.repair is not None or self._batch is None:
            return group
        while (
            self._queue
            and len(group) < GROUP_COMMIT_LIMIT
            and self._queue[0].generation is first.generation
            and self._queue[0].repair is None
        ):
            group.append(self._queue.popleft())
        return group

    async def _process_group(self, group: list[_Item]) -> None:
        gen = group[0].generation
        if gen.error is not None:
            gen.dropped += len(group)  # latched: nothing may land behind the missing Step
        else:
            assert self._batch is not None
            items = [(item.kind, item.data) for item in group]
            try:
                await self._batch.append_steps(self.run_id, self.seq, items, self._clock.now())
            except Exception as exc:
                gen.failed_kind, gen.error = group[0].kind, exc
            else:
                gen.written += len(group)
        gen.settled += len(group)
        self._changed.notify()

    async def _process(self, item: _Item) -> None:
        gen = item.generation
        if gen.error is not None:
            gen.dropped += 1  # latched: nothing may land behind the missing Step
        else:
            try:
                if item.repair is not None:
                    item.repair.step = await self._repair_once(item)
                else:
                    await self._ledger.append_step(
                        self.run_id, self.seq, item.kind, item.data, self._clock.now()
                    )
            except Exception as exc:
                gen.failed_kind, gen.error = item.kind, exc
            else:
                gen.written += 1
        if item.repair is not None:
            item.repair.done = True
        gen.settled += 1
        self._changed.notify()

    async def _repair_once(self, item: _Item) -> Step:
        for step in await self._ledger.steps(self.run_id):
            if step.kind == item.kind and step.data == item.data:
                return step  # an earlier, ambiguous append did land
        return await self._ledger.append_step(
            self.run_id, self.seq, item.kind, detach(item.data), self._clock.now()
        )

    # -- the tee ----------------------------------------------------------------

    async def write(self, event: Event) -> None:
        """Accept one event of this Run for persistence (token events are ignored).

        Waits while the queue is full. Never raises for an append failure
        (that is reported by `barrier`); raises StepWriterClosed when the
        writer is not running.
        """
        if event.run_id != self.run_id:
            raise ValueError(f"event of Run {event.run_id} given to the writer of {self.run_id}")
        if not event.persisted:
            return
        await self._enqueue(_Item(self._gen, event.kind, detach(event.data)))

    async def _enqueue(self, item: _Item) -> None:
        await self._wait_room(item.kind)
        self._push(item)

    async def _wait_room(self, kind: str) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            if not self.running:
                raise StepWriterClosed(self.run_id, f"write Step {kind!r}")
            if len(self._queue) < self._capacity:
                return
            await self._room.wait()

    def _push(self, item: _Item) -> None:
        """Queue an item; callers have just seen room, with no await since."""
        self._queue.append(item)
        item.generation.accepted += 1
        self._work.notify()

    async def barrier(self) -> None:
        """Wait until every Step accepted so far in this generation is written.

        Raises StepWriteFailed (the generation's latched failure, for every
        waiter alike) or StepWriterClosed when the writer stopped first.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        gen = self._gen
        target = gen.accepted
        self._waiters += 1
        if self._linger_s > 0 and self._queue:
            self._work.notify()  # a lingering group is wanted now
        try:
            while True:
                if gen.error is not None:
                    raise self._failed(gen) from gen.error
                if gen.settled >= target:
                    return
                if self._stopped:
                    raise StepWriterClosed(self.run_id, "flush its Steps")
                await self._changed.wait()
        finally:
            self._waiters -= 1

    # -- handing Steps to a settlement (issue 17) ---------------------------------

    async def wait_idle(self) -> None:
        """Wait until no append is in flight (queued Steps may stay queued).

        Raises StepWriteFailed (the latched failure) or StepWriterClosed, as
        `barrier` does."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        gen = self._gen
        while True:
            if gen.error is not None:
                raise self._failed(gen) from gen.error
            if not self._busy:
                return
            if self._stopped:
                raise StepWriterClosed(self.run_id, "settle its append")
            await self._changed.wait()

    def take_pending(self) -> list[StepItem] | None:
        """Every queued Step, in order, withdrawn from the writer for another
        transaction to write right behind the ones written; or None (nothing is
        taken) unless the writer runs with nothing in flight, nothing latched, no
        repair and no barrier waiting. No await: the caller detaches the writer
        from its channel before its next await, so nothing is teed in between."""
        gen = self._gen
        if (not self.running or self._busy or gen.error is not None or self._repair is not None
                or self._waiters > 0 or any(i.generation is not gen for i in self._queue)):
            return None
        taken = [(item.kind, item.data) for item in self._queue]
        if taken:  # (nothing to wake for otherwise: a wake-up is a scheduler turn)
            self._queue.clear()
            gen.accepted -= len(taken)  # no longer this writer's to write
            self._room.notify()
            self._work.notify()
        return taken

    def restore(self, items: Sequence[StepItem]) -> bool:
        """Give back Steps `take_pending` withdrew whose transaction did not write
        them, ahead of anything queued since; False (nothing queued) when the
        writer no longer runs or has no room."""
        if not items:
            return True
        if not self.running or len(self._queue) + len(items) > self._capacity:
            return False
        for item in reversed(items):
            self._queue.appendleft(_Item(self._gen, item[0], item[1]))
        self._gen.accepted += len(items)
        self._work.notify()
        return True

    def _failed(self, gen: _Generation) -> StepWriteFailed:
        assert gen.error is not None and gen.failed_kind is not None
        return StepWriteFailed(self.run_id, gen.number, gen.failed_kind, gen.error)

    # -- repair -------------------------------------------------------------------

    async def repair(self, kind: str, data: Mapping[str, Any] | None = None) -> Step:
        """Retry one missing Step exactly once, in a fresh writer generation.

        Single-flight: a caller arriving while an identical repair is in
        flight shares its outcome; a different repair waits for it first.
        Returns the Step as the ledger holds it (already there, or appended
        now); raises StepWriteFailed, latched on the fresh generation, when
        that one attempt fails.
        """
        payload = detach(dict(data)) if data else {}
        while (current := self._repair) is not None:
            await self._wait_repair(current)
            if current.done and current.kind == kind and current.data == payload:
                return self._repaired(current)  # the same Step: share that one attempt
            if self._repair is current:
                await self._changed.wait()  # its caller is leaving; then it is our turn
        mine = self._repair = _Repair(kind, payload)
        try:
            # The generation in flight settles first; its latched failure is what we answer.
            with contextlib.suppress(StepWriteFailed):
                await self.barrier()
            await self._wait_room(kind)
            # The fresh generation starts with the retried Step: no await until it is queued.
            self._gen = mine.generation = _Generation(self._gen.number + 1)
            self._push(_Item(self._gen, kind, detach(payload), mine))
            await self._wait_repair(mine)
            return self._repaired(mine)
        finally:
            if not mine.done:
                mine.abandoned = True
            if self._repair is mine:
                self._repair = None
            self._changed.notify()

    async def _wait_repair(self, repair: _Repair) -> None:
        while not (repair.done or repair.abandoned):
            if self._stopped:
                raise StepWriterClosed(self.run_id, f"repair Step {repair.kind!r}")
            await self._changed.wait()

    def _repaired(self, repair: _Repair) -> Step:
        gen = repair.generation
        assert gen is not None
        if repair.step is None:
            error = gen.error
            assert error is not None
            raise StepWriteFailed(self.run_id, gen.number, repair.kind, error) from error
        return repair.step.model_copy(update={"data": detach(repair.step.data)})
