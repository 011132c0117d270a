"""Invariants of live Run channels (seed 000 "Events, settlement, and waits").

The `events` scenario's followers hand the checker what a real subscriber
would see: the channel as it stood the instant before `subscribe` (it is
synchronous, so nothing moves in between), the Subscription or the refusal
it got, and how the stream ended. The checker judges them against its own
reading of the rules: it reads the channel's state, never calls its methods,
and adds no await, so traces are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtime.events.channel import ResyncReason
from runtime.events.errors import (
    CapacityExceeded,
    ChannelClosed,
    CursorFromFuture,
    InvalidCursor,
)
from runtime.events.writer import GROUP_COMMIT_LIMIT, StepWriter

if TYPE_CHECKING:
    from types import FrameType
    from uuid import UUID

    from runtime.events.channel import RunChannel, Subscription
    from sim.checker import Checker
    from sim.world import Boot

WRITER_APPENDS = ("_process", "_process_group")
"""The StepWriter methods that hand a taken group to the ledger."""

QUEUE_BOUND = 256
"""The checker's copy of a live reader's queue bound (seed 000), unless the world shrinks
the channels' bounds (`World.event_limits`, the `events` scenario's 64)."""

INVARIANTS = (
    ("subscribe_honest", "a subscription is refused exactly when the channel is closed, the "
     "cursor is negative or beyond the last event, or the subscriber bound is reached; an "
     "accepted one starts with every held event after its cursor, or with one resync "
     "boundary when the cursor is older than the replay window or the backlog exceeds the "
     "reader's queue, and one already past the terminal event is done at once",
     "seed 000 'Events, settlement, and waits' (replay from a cursor, explicit resync)"),
    ("stream_reaches_terminal", "a reader that keeps up sees its Run's stream to the end: an "
     "iteration that ends without the terminal event was cut off by a channel closed "
     "without one (or after the grace a slow reader outlived)",
     "seed 000 'Events, settlement, and waits' (close drains readers after the terminal "
     "event)"),
    ("tee_to_live_writer", "an open channel tees its Steps only to the Step writer of a hop "
     "still running it: a hop detaches its writer before the writer closes, so a parked "
     "Run's open channel tees to nobody until its next hop attaches its own",
     "seed 000 'Events, settlement, and waits' (one ordered writer per hop; a parked hop "
     "leaves its channel open for readers)"),
    ("dropped_channel_unread", "a channel its owner has closed and dropped holds no reader: "
     "each has taken the terminal event, left, or been cut off when the channel closed",
     "seed 000 'Events, settlement, and waits' (close drains readers or cuts them off after "
     "the grace; the channel rejects readers once closed)"),
    ("cancel_closes_channel", "a cancel that answers CANCELLED has ended the Run's live "
     "channel in the process that answered: the terminal event went to its readers and "
     "the channel is closed, so no reader waits on a Run whose truth is final",
     "seed 000 'Events, settlement, and waits' (terminal paths publish the terminal event, "
     "flush, then close the channel); 'Cancellation, mutation, and recovery'"),
    ("replay_window_honest", "a channel's events take consecutive cursors from 1: its replay "
     "holds the newest of them up to its limit, ending at the channel's cursor and starting "
     "at cursor 1 until the window fills, and its replay_window names exactly that span",
     "seed 000 'Events, settlement, and waits' (replay retains at most 256 events; a cursor "
     "outside replay gets one resync boundary)"),
    ("reader_registered", "an accepted reader that is not done at once is registered with its "
     "channel beside every reader already there (their count grows by one), so each later "
     "event is offered to it",
     "seed 000 'Events, settlement, and waits' (each live subscriber has its own bounded "
     "queue)"),
    ("cut_off_honest", "a reader is reported cut off only when its channel closed before it "
     "took the terminal event: one that took it, or whose channel is still open, is not",
     "seed 000 'Events, settlement, and waits' (remaining readers are cut off when the "
     "channel closes after the grace)"),
    ("group_takes_queued", "a Step writer on a ledger that writes several Steps at once "
     "hands it every Step already queued behind the first that may share its append (same "
     "writer generation, no repair), up to the group limit: no Step it could carry waits "
     "for a later transaction",
     "issue 17, M14 (group commit: the one append in flight carries every Step already "
     "queued in its generation, up to GROUP_COMMIT_LIMIT, in publish order)"),
    ("close_ends_when_drained", "a close waiting for its readers after the terminal event "
     "ends once the last one took it or left: no closing channel stands with no reader "
     "left, waiting out its grace for nobody",
     "seed 000 'Events, settlement, and waits' (close waits until every subscriber has "
     "taken the terminal event or left, or until the grace expires)"),
    ("reader_queue_bound", "a live reader holds at most 256 undelivered events (the "
     "world's own bound where it shrinks the channels): while it takes nothing, every "
     "event after its last cursor is queued for it as long as there are at most 256, "
     "and once there are more it is owed one resync boundary instead, never earlier "
     "(judged as each event reaches a stalled reader)",
     "seed 000 'Events, settlement, and waits' (each live subscriber's queue holds at "
     "most 256 events; a reader whose queue would overflow gets one resync boundary)"),
    ("closed_channel_discarded", "a Run's channel is closed only through its bus, which "
     "forgets it in the same step: no bus of a live process holds a closed channel",
     "seed 000 'Events, settlement, and waits' (the bus is a live stream; a channel "
     "lives until its owner closes and discards it, runtime/events/bus.py)"),
    ("barrier_ends_linger", "a Step writer holding queued Steps for a later group "
     "(lingering) stops holding them once a barrier waits on it: it never waits for more "
     "work while a barrier waits and Steps are queued",
     "issue 17, M14 (a hop's writer lingers only while nobody waits on its Steps; a "
     "barrier, a repair, a full group or queue and closing end the linger at once)"),
)


@dataclass(frozen=True)
class Before:
    """What `subscribe` found."""

    closed: bool
    cursor: int
    subscribers: int
    terminal_cursor: int | None
    held: tuple[int, ...]
    """Cursors held for replay, oldest first."""
    queue_limit: int
    replay_limit: int
    max_subscribers: int
    window: tuple[int, int] | None
    """What the channel's `replay_window` reported."""


def before(channel: RunChannel) -> Before:
    terminal = channel._terminal
    return Before(
        closed=channel._closed, cursor=channel._cursor, subscribers=len(channel._subscribers),
        terminal_cursor=None if terminal is None else terminal.cursor,
        held=tuple(e.cursor for e in channel._replay), queue_limit=channel._queue_limit,
        replay_limit=channel._replay.maxlen or 0, max_subscribers=channel._max_subscribers,
        window=channel.replay_window,  # a property: reads, moves nothing
    )


class EventChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.followed: list[tuple[Boot, UUID, RunChannel]] = []
        """Channels a follower subscribed to, until their bus dropped them and they
        were judged (dropped_channel_unread)."""

    def on_followed(self, boot: Boot, run_id: UUID, channel: RunChannel) -> None:
        if not any(c is channel for _, _, c in self.followed):
            self.followed.append((boot, run_id, channel))

    def fail(self, invariant: str, message: str, **records: Any) -> None:
        self.checker.fail(invariant, message, **records)

    @property
    def queue_bound(self) -> int:
        """A reader's queue bound as the checker knows it (not the channel's own)."""
        limits = self.checker.world.event_limits
        return QUEUE_BOUND if limits is None else limits[1]

    def on_unread(self, name: str, sub: Subscription, channel: RunChannel) -> None:
        """Reader `name` has taken nothing since its last cursor (stalled) and the
        channel has just offered it an event (or it just subscribed), before any
        await: reader_queue_bound."""
        if sub._done or sub._resync is ResyncReason.OUTSIDE_REPLAY:
            return  # gone, or owed the boundary it started with
        behind, bound = channel._cursor - sub._last, self.queue_bound
        owed, queued = sub._resync is not None, len(sub._queue)
        if owed == (behind > bound) and queued == (0 if owed else behind):
            return
        self.fail("reader_queue_bound", f"{name}, {behind} event(s) behind its cursor "
                  f"{sub._last} and taking none, holds {queued} queued "
                  f"{'with' if owed else 'without'} a resync owed; owed "
                  f"{'one resync and none queued' if behind > bound else f'all {behind}'} "
                  f"(queue bound {bound})", sub=name, run=str(channel.run_id))

    def on_subscribe(self, name: str, after: int, found: Before, sub: Subscription | None,
                     error: BaseException | None) -> None:
        where = {"sub": name, "after": after, "found": found.__dict__}
        self._replay_window(name, found)
        expected: type[BaseException] | None = None
        if found.closed:
            expected = ChannelClosed
        elif after < 0:
            expected = InvalidCursor
        elif after > found.cursor:
            expected = CursorFromFuture
        elif found.subscribers >= found.max_subscribers:
            expected = CapacityExceeded
        got = None if error is None else type(error)
        if got is not expected:
            self.fail("subscribe_honest", f"{name} subscribing after cursor {after} got "
                      f"{got.__name__ if got else 'a subscription'}, not "
                      f"{expected.__name__ if expected else 'a subscription'}", **where)
        if sub is None:
            return
        if found.terminal_cursor is not None and after >= found.terminal_cursor:
            if not sub._done or sub._queue or sub._resync is not None:
                self.fail("subscribe_honest", f"{name} subscribed past the terminal event but "
                          "is not done at once", **where)
            return
        self._registered(name, sub, found)
        first = found.held[0] if found.held else found.cursor + 1
        missed = [c for c in found.held if c > after]
        resync = after < first - 1 or len(missed) > self.queue_bound
        queued = [e.cursor for e in sub._queue]
        if sub._done or (sub._resync is not None) != resync or \
                (not resync and queued != missed) or (resync and queued):
            self.fail("subscribe_honest", f"{name} subscribed after cursor {after} with "
                      f"{'a resync' if sub._resync is not None else 'no resync'} and "
                      f"{len(queued)} queued; owed {'a resync' if resync else 'no resync'} "
                      f"and {len(missed)}", **where)

    def _replay_window(self, name: str, found: Before) -> None:
        held, cursor = found.held, found.cursor
        owed = (cursor - len(held) + 1, cursor) if held else None
        dense = held == tuple(range(cursor - len(held) + 1, cursor + 1))
        from_one = len(held) >= found.replay_limit or (held[:1] or (1,))[0] == 1
        if dense and from_one and (held or cursor == 0) and found.window == owed:
            return
        self.fail("replay_window_honest", f"{name} found a channel at cursor {cursor} holding "
                  f"{len(held)} event(s) for replay (cursors {held[:1]}..{held[-1:]}, limit "
                  f"{found.replay_limit}) that reports the window {found.window}",
                  sub=name, found=found.__dict__)

    def _registered(self, name: str, sub: Subscription, found: Before) -> None:
        readers = sub._channel._subscribers
        if readers.get(sub._key) is sub and len(readers) == found.subscribers + 1:
            return
        self.fail("reader_registered", f"{name} was accepted by a channel that had "
                  f"{found.subscribers} reader(s) and now has {len(readers)}, "
                  f"{'with' if readers.get(sub._key) is sub else 'without'} it", sub=name)

    def on_stream_end(self, name: str, sub: Subscription, channel: RunChannel,
                      slow: bool) -> None:
        """An iteration that ended without raising (`slow`: a reader that pauses)."""
        terminal = channel._terminal
        if sub._cut_off and (not channel._closed or (terminal is not None
                                                     and sub._last >= terminal.cursor)):
            why = "is open" if not channel._closed else "closed after it took the terminal event"
            self.fail("cut_off_honest", f"{name} is reported cut off, yet its channel {why}",
                      sub=name)
        if terminal is not None and sub._last >= terminal.cursor:
            return  # it took the terminal event, or subscribed past it
        if sub._cut_off and (terminal is None or slow):
            return
        self.fail("stream_reaches_terminal", f"{name} stopped reading at cursor "
                  f"{sub._last} without the terminal event "
                  f"({'cut off' if sub._cut_off else 'not cut off'}, channel "
                  f"{'closed' if channel._closed else 'open'})", sub=name)

    def on_cancelled(self, run_id: UUID, boot: Boot) -> None:
        """An operator's cancel answered CANCELLED through `boot` (read before any
        await: nothing moves between the answer and this look)."""
        if not boot.alive:
            return  # its memory, channels included, died with it
        channel = boot.vessel.worker.bus.get(run_id)
        if channel is not None and not channel._closed:
            self.checker.report("cancel_closes_channel", f"a cancel of Run {run_id} answered "
                                f"CANCELLED through boot {boot.number} with its channel still "
                                f"open (cursor {channel._cursor}, terminal "
                                f"{'published' if channel._terminal else 'not published'})",
                                run=str(run_id), boot=boot.number)

    def after_write(self) -> None:
        """closed_channel_discarded, tee_to_live_writer, close_ends_when_drained and
        barrier_ends_linger, over every channel of the boots alive now (and the writer
        it tees to); dropped_channel_unread, over the followed channels their bus has
        dropped."""
        if self.followed:
            self._dropped_channels()
        for boot in self.checker.world.alive_boots():
            for run_id, channel in boot.vessel.worker.bus._channels.items():
                if channel._closed:  # close sets it and the bus discards, with no await
                    self.fail("closed_channel_discarded", f"the bus of boot {boot.number} "
                              f"still holds the closed channel of Run {run_id}",
                              run=str(run_id), boot=boot.number)
                self._closing(boot, run_id, channel)
                sink = channel._sink
                if isinstance(sink, StepWriter):
                    self._lingering(boot, run_id, sink)
                if channel._closed or sink is None or not getattr(sink, "_closing", False):
                    continue
                self.fail("tee_to_live_writer", f"the open channel of Run {run_id} in boot "
                          f"{boot.number} still tees to the Step writer of a hop that left",
                          run=str(run_id), boot=boot.number)

    def on_step_append(self, caller: FrameType | None) -> None:
        """A batching ledger's Step append, called from `caller` (the writer's frame,
        before any await: its queue holds exactly what it left after taking the group)."""
        for _ in range(4):  # through the fault proxies' wrappers
            if caller is None or caller.f_code.co_name in WRITER_APPENDS:
                break
            if caller.f_code.co_name == "_repair_once":
                return  # a repair's read-then-append: always alone
            caller = caller.f_back
        if caller is None or caller.f_code.co_name not in WRITER_APPENDS:
            return
        writer = caller.f_locals.get("self")
        if not isinstance(writer, StepWriter) or writer._batch is None:
            return
        group = caller.f_locals.get("group") or [caller.f_locals.get("item")]
        first = group[0]
        if first is None or first.repair is not None or len(group) >= GROUP_COMMIT_LIMIT:
            return
        head = writer._queue[0] if writer._queue else None
        if head is None or head.generation is not first.generation or head.repair is not None:
            return
        self.fail("group_takes_queued", f"the Step writer of Run {writer.run_id} appends "
                  f"{len(group)} Step(s) ({first.kind} first) and leaves {len(writer._queue)} "
                  f"of the same generation queued behind them", run=str(writer.run_id))

    def _closing(self, boot: Boot, run_id: UUID, channel: RunChannel) -> None:
        """Only `close` waits on a channel's change signal, and only while readers are
        attached after the terminal event; every reader that leaves signals it, so a
        waiter left on it with no reader attached has missed the last one leaving."""
        if (channel._terminal is None or channel._closed or channel._subscribers
                or channel._changed._event is None):
            return
        self.fail("close_ends_when_drained", f"the close of Run {run_id}'s channel in boot "
                  f"{boot.number} still waits with no reader left (terminal at cursor "
                  f"{channel._terminal.cursor}): it waits out its grace for nobody",
                  run=str(run_id), boot=boot.number)

    def _lingering(self, boot: Boot, run_id: UUID, writer: StepWriter) -> None:
        """The writer task waits on its work signal only for an empty queue or inside
        a linger, and a barrier signals it when Steps are queued; so that wait with a
        barrier waiting and Steps queued means the linger ignored the barrier."""
        if (writer._linger_s <= 0 or writer._waiters == 0 or not writer._queue
                or writer._busy or writer._stopped or writer._work._event is None):
            return
        self.fail("barrier_ends_linger", f"the Step writer of Run {run_id} in boot "
                  f"{boot.number} holds {len(writer._queue)} queued Step(s) for a later "
                  f"group while {writer._waiters} barrier(s) wait on it",
                  run=str(run_id), boot=boot.number)

    def _dropped_channels(self) -> None:
        keep = []
        for boot, run_id, channel in self.followed:
            if not boot.alive:
                continue  # its memory, channels included, died with it
            if boot.vessel.worker.bus.get(run_id) is channel:
                keep.append((boot, run_id, channel))
                continue
            if channel._subscribers:
                self.fail("dropped_channel_unread", f"the channel of Run {run_id} in boot "
                          f"{boot.number} was dropped with {len(channel._subscribers)} "
                          f"reader(s) still attached (channel "
                          f"{'closed' if channel._closed else 'never closed'})",
                          run=str(run_id), boot=boot.number)
        self.followed = keep
