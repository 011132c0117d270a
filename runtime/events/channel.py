"""RunChannel: the process-local live event stream of one Run.

Seed 000_81a5c720b14d934a.txt, "Events, settlement, and waits", first two
paragraphs, in our words:

* The replay buffer and every live subscriber's queue each hold at most 256
  events (`REPLAY_LIMIT`, `QUEUE_LIMIT`).
* A subscriber resuming after a cursor that is still inside the replay
  window gets the missed events, then live events. A cursor older than the
  replay window, or a live reader whose queue would overflow, instead gets
  exactly one `resync` boundary event: its cursor is the channel's current
  cursor and its `data["snapshot"]` is the Run's authoritative record, which
  replaces everything up to and including that cursor; live tailing then
  continues after it. While a resync is owed, nothing more is queued for
  that reader (the boundary covers it), so one burst costs one resync.
* A cursor from the future (greater than the current cursor) is refused
  with `CursorFromFuture`, which names both cursors.
* The channel accepts one terminal event (run.done, run.failed or
  run.cancelled); anything published after it raises `EventAfterTerminal`.
  A reader never loses the terminal event to a resync: a boundary delivered
  after the terminal event was published sits just before it, and the
  terminal event follows as the reader's last event. (The snapshot is read
  when the boundary is delivered, so it is at least as new as the boundary.)
* `close()` after the terminal event waits until every subscriber has taken
  the terminal event (or left), or until the grace period (default 5 s, an
  anyio timeout) expires; remaining readers are then cut off. The channel
  rejects new subscribers and events once closed.
* Metadata is detached at every boundary: `publish` deep-copies what it is
  given and returns a copy; replay, each delivery, the resync snapshot and
  the copy handed to the Step writer are all deep copies, so no reader can
  change what another reader, the replay buffer or the ledger sees.

Non-token events are handed, in cursor order and before any reader sees
them, to the attached `EventSink` (the `StepWriter`), whose bounded queue
applies backpressure to `publish`. Token deltas are live-only.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Protocol
from uuid import UUID

import anyio
import anyio.lowlevel

from runtime.events._signal import Signal
from runtime.events.errors import (
    CapacityExceeded,
    ChannelClosed,
    CursorFromFuture,
    EventAfterTerminal,
    InvalidCursor,
    ReservedKind,
)
from runtime.events.model import (
    CLOSE_GRACE_S,
    QUEUE_LIMIT,
    REPLAY_LIMIT,
    Event,
    EventKind,
    detach,
)

MAX_SUBSCRIBERS = 1024
"""Live subscribers per channel; one more raises `CapacityExceeded`."""

SnapshotSource = Callable[[], Mapping[str, Any]]
"""Returns the Run's current authoritative record as a dict (synchronously, so
the snapshot and the boundary cursor are read at the same instant)."""


class EventSink(Protocol):
    """Where a channel tees its persisted (non-token) events, in cursor order."""

    async def write(self, event: Event) -> None: ...


class ResyncReason(enum.StrEnum):
    OUTSIDE_REPLAY = "outside_replay"
    FELL_BEHIND = "fell_behind"


class RunChannel:
    """The live event stream of one Run in this process (nothing here is durable)."""

    def __init__(
        self,
        run_id: UUID,
        snapshot: SnapshotSource,
        *,
        sink: EventSink | None = None,
        replay_limit: int = REPLAY_LIMIT,
        queue_limit: int = QUEUE_LIMIT,
        max_subscribers: int = MAX_SUBSCRIBERS,
    ) -> None:
        if replay_limit < 1 or queue_limit < 1 or max_subscribers < 1:
            raise ValueError("channel bounds must be positive")
        self.run_id = run_id
        self.snapshot_source = snapshot
        self._sink = sink
        self._replay: deque[Event] = deque(maxlen=replay_limit)
        self._queue_limit = queue_limit
        self._max_subscribers = max_subscribers
        self._cursor = 0
        self._terminal: Event | None = None
        self._closed = False
        self._subscribers: dict[int, Subscription] = {}
        self._next_key = 0
        self._lock = anyio.Lock()
        self._changed = Signal()

    # -- state ----------------------------------------------------------------

    @property
    def cursor(self) -> int:
        """Cursor of the last published event; 0 before the first."""
        return self._cursor

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def terminal(self) -> Event | None:
        """A copy of the accepted terminal event, if any."""
        return None if self._terminal is None else self._terminal.detached()

    @property
    def replay_window(self) -> tuple[int, int] | None:
        """First and last cursor held for replay, or None before the first event."""
        if not self._replay:
            return None
        return self._replay[0].cursor, self._replay[-1].cursor

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def attach(self, sink: EventSink | None) -> None:
        """Tee later persisted events to `sink` (the current hop's Step writer)."""
        self._sink = sink

    def detach(self, sink: EventSink) -> None:
        """Stop teeing to `sink`, unless a later hop has attached its own writer since:
        an old hop finishing late must never unhook the current hop's Steps."""
        if self._sink is sink:
            self._sink = None

    def snapshot(self) -> dict[str, Any]:
        """The owner's authoritative record, detached."""
        return detach(dict(self.snapshot_source()))

    # -- publishing -----------------------------------------------------------

    async def publish(self, kind: str, data: Mapping[str, Any] | None = None) -> Event:
        """Append one event at the next cursor; returns a detached copy of it.

        Raises ReservedKind for `resync`, EventAfterTerminal once the terminal
        event was accepted, ChannelClosed after `close()`. Waits while the
        attached Step writer's bounded queue is full.
        """
        if kind == EventKind.RESYNC:
            raise ReservedKind(self.run_id, kind)
        payload = detach(dict(data)) if data else {}
        async with self._lock:
            self._admit(kind)
            event = Event(run_id=self.run_id, cursor=self._cursor + 1, kind=kind, data=payload)
            if self._sink is not None and event.persisted:
                await self._sink.write(event.detached())
            # No await from here on: cursor, replay and every reader move together.
            self._cursor = event.cursor
            self._replay.append(event)
            if event.terminal:
                self._terminal = event
            for subscriber in list(self._subscribers.values()):
                subscriber._offer(event)
        return event.detached()

    def _admit(self, kind: str) -> None:
        if self._terminal is not None:
            raise EventAfterTerminal(self.run_id, kind, self._terminal.kind, self._terminal.cursor)
        if self._closed:
            raise ChannelClosed(self.run_id, f"publish {kind!r}")

    # -- subscribing ----------------------------------------------------------

    def subscribe(self, after_cursor: int = 0) -> Subscription:
        """Read every event after `after_cursor`, then tail live events.

        A cursor older than the replay window starts with one resync
        boundary. Raises CursorFromFuture when `after_cursor` is greater than
        the current cursor, InvalidCursor when it is negative, ChannelClosed
        after `close()`.
        """
        if self._closed:
            raise ChannelClosed(self.run_id, "subscribe")
        if after_cursor < 0:
            raise InvalidCursor(self.run_id, after_cursor, self._cursor, "is negative")
        if after_cursor > self._cursor:
            raise CursorFromFuture(self.run_id, after_cursor, self._cursor)
        if len(self._subscribers) >= self._max_subscribers:
            raise CapacityExceeded(f"subscribers of Run {self.run_id}", self._max_subscribers)
        key, self._next_key = self._next_key, self._next_key + 1
        subscriber = Subscription(self, key, after_cursor)
        if self._terminal is not None and after_cursor >= self._terminal.cursor:
            subscriber._done = True  # it has already seen everything, terminal included
            return subscriber
        first = self._replay[0].cursor if self._replay else self._cursor + 1
        missed = [e for e in self._replay if e.cursor > after_cursor]
        if after_cursor < first - 1 or len(missed) > self._queue_limit:
            subscriber._resync = ResyncReason.OUTSIDE_REPLAY
        else:
            subscriber._queue.extend(missed)
        self._subscribers[key] = subscriber
        return subscriber

    def _remove(self, key: int) -> None:
        if self._subscribers.pop(key, None) is not None:
            self._changed.notify()

    # -- closing --------------------------------------------------------------

    async def close(self, grace: float = CLOSE_GRACE_S) -> None:
        """Close the channel: after its terminal event, once readers drained or `grace` expired.

        Without a terminal event nobody can drain, so the channel closes at
        once. Readers still attached when it closes are cut off.
        """
        if self._closed:
            return
        if self._terminal is not None:
            with anyio.move_on_after(grace):
                while self._subscribers:
                    await self._changed.wait()
        self._closed = True
        for subscriber in list(self._subscribers.values()):
            subscriber._cut()
        self._subscribers.clear()
        self._changed.notify()


class Subscription:
    """One reader of a RunChannel: an async iterator of detached events.

    Use it as `async with channel.subscribe(cursor) as events: async for e in
    events: ...` so that a reader that stops early leaves at once instead of
    holding up `close()` until the grace period ends. Iteration ends after
    the terminal event, or when the channel closes under the reader
    (`cut_off` is then true).
    """

    def __init__(self, channel: RunChannel, key: int, after_cursor: int) -> None:
        self._channel = channel
        self._key = key
        self._queue: deque[Event] = deque(maxlen=channel._queue_limit)
        self._resync: ResyncReason | None = None
        self._last = after_cursor
        self._done = False
        self._cut_off = False
        self._wake = Signal()
        self.resyncs = 0

    @property
    def last_cursor(self) -> int:
        """Cursor of the last event (or boundary) this reader was given."""
        return self._last

    @property
    def pending(self) -> int:
        """Events queued for this reader and not yet taken."""
        return len(self._queue)

    @property
    def resync_owed(self) -> bool:
        return self._resync is not None

    @property
    def done(self) -> bool:
        return self._done

    @property
    def cut_off(self) -> bool:
        """True when the channel closed before this reader took the terminal event."""
        return self._cut_off

    # -- fed by the channel (synchronously, inside publish) ----------------------

    def _offer(self, event: Event) -> None:
        if self._done or self._resync is not None:
            return  # a pending boundary covers it (the terminal event is re-queued then)
        if len(self._queue) >= self._channel._queue_limit:
            self._queue.clear()
            self._resync = ResyncReason.FELL_BEHIND
        else:
            self._queue.append(event)
        self._wake.notify()

    def _cut(self) -> None:
        if not self._done:
            self._cut_off = True
        self._finish()

    def _finish(self) -> None:
        self._done = True
        self._queue.clear()
        self._resync = None
        self._channel._remove(self._key)
        self._wake.notify()

    # -- read by the subscriber ------------------------------------------------

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._done:
                raise StopAsyncIteration
            if self._resync is not None:
                return self._boundary()
            if self._queue:
                event = self._queue.popleft()
                self._last = event.cursor
                if event.terminal:
                    self._finish()
                return event.detached()
            await self._wake.wait()

    def _boundary(self) -> Event:
        channel = self._channel
        snapshot = channel.snapshot()  # first: if the owner's source raises, still owed
        reason, self._resync = self._resync, None
        terminal = channel._terminal
        boundary = channel.cursor if terminal is None else terminal.cursor - 1
        self._queue.clear()
        if terminal is not None:
            self._queue.append(terminal)
        self._last = boundary
        self.resyncs += 1
        return Event(
            run_id=channel.run_id,
            cursor=boundary,
            kind=EventKind.RESYNC,
            data={"reason": str(reason), "snapshot": snapshot},
        )

    async def aclose(self) -> None:
        """Leave the channel; iteration ends."""
        if not self._done:
            self._finish()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
