"""A Run's events as server-sent events.

Seed 000_81a5c720b14d934a.txt, "Events, settlement, and waits": a Run's
channel is process-local and bounded; a reader resuming after a cursor
outside replay, or falling behind, gets one resync boundary whose
authoritative snapshot replaces everything through it; the channel accepts
one terminal event. This module puts that on the wire:

- Each event is one SSE frame: `id:` the channel cursor, `event:` the kind,
  `data:` the event as one line of JSON (`run_id`, `cursor`, `kind`,
  `data`). Resync boundaries are frames of kind `resync` whose
  `data.snapshot` is the Run's record.
- `Last-Event-ID` resumes after that cursor. `open_events` checks it before
  any byte is streamed: a cursor ahead of the live channel raises
  `CursorFromFuture` (the HTTP layer answers 409 with a JSON body, not a
  stream). Without a live channel in this process (the Run has not been
  claimed here yet, or its channel already closed, or the process
  restarted) there is no cursor to compare against: the stream starts with
  a resync boundary at cursor 0 (`reason` "no_live_channel") carrying the
  ledger's record, then tails the channel once a hop of this process opens
  it, from its first event.
- The stream ends after the terminal event, or after a resync boundary whose
  snapshot is terminal (the Run ended where this reader could not see its
  channel), or when the Vessel stops serving. An idle stream sends an SSE
  comment every `KEEPALIVE_S` so intermediaries keep it open.
- Nothing here writes to the ledger.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from uuid import UUID

import anyio

from runtime.events.bus import EventBus
from runtime.events.channel import Subscription
from runtime.events.errors import CapacityExceeded, ChannelClosed
from runtime.events.hop import run_record
from runtime.events.model import Event, EventKind
from runtime.models import Run
from runtime.seams import Ledger

TICK_S = 0.25
"""How often an idle stream re-checks for a channel, the Run's end and shutdown."""
KEEPALIVE_S = 15.0
NO_LIVE_CHANNEL = "no_live_channel"
KEEPALIVE = b": keepalive\n\n"


def frame(event: Event) -> bytes:
    """One SSE frame: id = cursor, event = kind, data = the event as one JSON line."""
    kind = event.kind.replace("\r", " ").replace("\n", " ")
    data = json.dumps(event.model_dump(mode="json"), separators=(",", ":"), default=str)
    return f"id: {event.cursor}\nevent: {kind}\ndata: {data}\n\n".encode()


def boundary(run: Run, reason: str = NO_LIVE_CHANNEL) -> Event:
    """A resync boundary at cursor 0 from the ledger's record of the Run."""
    return Event(
        run_id=run.id,
        cursor=0,
        kind=EventKind.RESYNC,
        data={"reason": reason, "snapshot": run_record(run)},
    )


def _snapshot_terminal(event: Event) -> bool:
    snapshot = event.data.get("snapshot")
    status = snapshot.get("status") if isinstance(snapshot, dict) else None
    return status in ("DONE", "FAILED", "CANCELLED")


def open_events(bus: EventBus, run_id: UUID, after: int) -> Subscription | None:
    """Subscribe to the Run's live channel after `after`, or None without one.

    Raises CursorFromFuture (or InvalidCursor) before anything is streamed.
    """
    channel = bus.get(run_id)
    if channel is None or channel.closed:
        return None
    try:
        return channel.subscribe(after)
    except ChannelClosed:
        return None


@dataclass
class _Found:
    subscription: Subscription | None = None
    final: Event | None = None


@dataclass
class RunEventStream:
    """The byte stream of one SSE response."""

    bus: EventBus
    ledger: Ledger
    run_id: UUID
    subscription: Subscription | None
    serving: Callable[[], bool]

    async def frames(self) -> AsyncIterator[bytes]:
        subscription = self.subscription
        try:
            if subscription is None:
                event = await self._boundary()
                if event is None:
                    return
                yield frame(event)
                if _snapshot_terminal(event):
                    return
            while self.serving():
                if subscription is None:
                    found = _Found()
                    async for chunk in self._await_channel(found):
                        yield chunk
                    if found.final is not None:
                        yield frame(found.final)
                    if found.subscription is None:
                        return
                    subscription = found.subscription
                ended: list[bool] = []
                async for chunk in self._tail(subscription, ended):
                    yield chunk
                if ended and ended[0]:
                    return
                subscription = None  # cut off without its terminal event: look again
        finally:
            if subscription is not None:
                await subscription.aclose()

    async def _boundary(self) -> Event | None:
        run = await self.ledger.get_run(self.run_id)
        return None if run is None else boundary(run)

    async def _tail(self, subscription: Subscription, ended: list[bool]) -> AsyncIterator[bytes]:
        """Events of one subscription; `ended` gets True after a terminal end."""
        idle = 0.0
        async with subscription:
            while self.serving():
                event: Event | None = None
                with anyio.move_on_after(TICK_S):
                    try:
                        event = await subscription.__anext__()
                    except StopAsyncIteration:
                        ended.append(not subscription.cut_off)
                        return
                if event is None:
                    idle += TICK_S
                    if idle >= KEEPALIVE_S:
                        idle = 0.0
                        yield KEEPALIVE
                    continue
                idle = 0.0
                yield frame(event)
                if event.terminal:
                    ended.append(True)
                    return
        ended.append(True)  # stopped serving: end the stream

    async def _await_channel(self, found: _Found) -> AsyncIterator[bytes]:
        """Wait for a live channel (its Subscription) or the Run's end (a
        terminal boundary, `found.final`). Yields keepalives while waiting."""
        idle = 0.0
        while self.serving():
            channel = self.bus.get(self.run_id)
            if channel is not None and not channel.closed:
                try:
                    found.subscription = channel.subscribe(0)
                    return
                except (ChannelClosed, CapacityExceeded):
                    pass
            run = await self.ledger.get_run(self.run_id)
            if run is None or run.status.terminal:
                if run is not None:
                    found.final = boundary(run)
                return
            await anyio.sleep(TICK_S)
            idle += TICK_S
            if idle >= KEEPALIVE_S:
                idle = 0.0
                yield KEEPALIVE
