"""The per-Run event channel and the bus (seed 000_81a5c720b14d934a.txt, "Events, settlement,
and waits"): bounded replay and subscriber queues, one resync boundary with an authoritative
snapshot, typed refusal of future cursors, one terminal event, close after drain or grace, and
metadata detached at every boundary."""

from __future__ import annotations

import inspect
import itertools
from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime.errors import RuntimeEngineError
from runtime.events import (
    CLOSE_GRACE_S,
    QUEUE_LIMIT,
    REPLAY_LIMIT,
    CapacityExceeded,
    ChannelClosed,
    CursorFromFuture,
    Event,
    EventAfterTerminal,
    EventBus,
    EventKind,
    InvalidCursor,
    ReservedKind,
    RunChannel,
    Subscription,
)
from tests.bounds import HANG_S

pytestmark = pytest.mark.anyio

RUN = UUID(int=7)


class Record:
    """The owner's authoritative Run record, as the snapshot source returns it."""

    def __init__(self) -> None:
        self.value: dict[str, Any] = {"id": str(RUN), "status": "RUNNING", "nodes": {"done": []}}

    def __call__(self) -> dict[str, Any]:
        return self.value  # deliberately the same object each time: the channel must copy


def channel(record: Record | None = None, **kwargs: Any) -> RunChannel:
    return RunChannel(RUN, record if record is not None else Record(), **kwargs)


async def publish_many(ch: RunChannel, n: int, kind: str = EventKind.NODE_STARTED) -> None:
    for _ in range(n):
        await ch.publish(kind, {"n": ch.cursor + 1})


async def take(sub: Subscription, n: int) -> list[Event]:
    return [await anext(sub) for _ in range(n)]


async def drain(sub: Subscription) -> list[Event]:
    return [e async for e in sub]


# -- bounds ------------------------------------------------------------------------------


async def test_replay_buffer_keeps_at_most_256_events() -> None:
    assert REPLAY_LIMIT == 256
    ch = channel()
    await publish_many(ch, 300)

    assert ch.cursor == 300
    assert ch.replay_window == (45, 300)
    oldest = ch.subscribe(after_cursor=44)  # the oldest cursor the window still answers
    assert [e.cursor for e in await take(oldest, 256)] == list(range(45, 301))
    assert oldest.resyncs == 0
    too_old = ch.subscribe(after_cursor=43)
    assert (await anext(too_old)).kind == EventKind.RESYNC


async def test_subscriber_queue_holds_at_most_256_events() -> None:
    assert QUEUE_LIMIT == 256
    ch = channel()
    sub = ch.subscribe(after_cursor=0)
    await publish_many(ch, 256)
    assert sub.pending == 256 and not sub.resync_owed

    await ch.publish(EventKind.NODE_STARTED)  # the 257th would overflow: not queued
    assert sub.pending == 0 and sub.resync_owed

    fresh = ch.subscribe(after_cursor=ch.cursor)
    await publish_many(ch, 256)
    assert [e.cursor for e in await take(fresh, 256)] == list(range(258, 514))
    assert fresh.resyncs == 0


# -- resync ------------------------------------------------------------------------------


async def test_cursor_outside_replay_gets_one_resync_with_snapshot_then_live() -> None:
    record = Record()
    ch = channel(record)
    await publish_many(ch, 300)
    record.value["status"] = "AWAITING_CONSENT"

    sub = ch.subscribe(after_cursor=10)
    boundary = await anext(sub)
    assert boundary.kind == EventKind.RESYNC
    assert boundary.cursor == 300  # the current cursor: replaces everything through it
    assert boundary.data["reason"] == "outside_replay"
    assert boundary.data["snapshot"] == record.value

    await ch.publish(EventKind.NODE_COMPLETED, {"node": "n1"})
    live = await anext(sub)
    assert (live.cursor, live.kind, live.data) == (301, EventKind.NODE_COMPLETED, {"node": "n1"})
    assert sub.resyncs == 1


async def test_slow_reader_gets_exactly_one_resync_then_live() -> None:
    ch = channel()
    sub = ch.subscribe(after_cursor=0)
    await publish_many(ch, 5)
    assert [e.cursor for e in await take(sub, 2)] == [1, 2]

    await publish_many(ch, 600)  # far more than its queue holds, in one burst
    assert sub.pending == 0 and sub.resync_owed
    boundary = await anext(sub)
    assert (boundary.kind, boundary.cursor) == (EventKind.RESYNC, 605)
    assert boundary.data["reason"] == "fell_behind"
    assert boundary.data["snapshot"]["status"] == "RUNNING"

    await publish_many(ch, 3)
    assert [(e.kind, e.cursor) for e in await take(sub, 3)] == [
        (EventKind.NODE_STARTED, 606),
        (EventKind.NODE_STARTED, 607),
        (EventKind.NODE_STARTED, 608),
    ]
    assert sub.resyncs == 1


async def test_terminal_event_is_never_folded_into_a_resync() -> None:
    record = Record()
    ch = channel(record)
    sub = ch.subscribe(after_cursor=0)
    await publish_many(ch, 300)
    record.value["status"] = "DONE"
    await ch.publish(EventKind.RUN_DONE, {"result": 1})

    events = await drain(sub)
    assert [(e.kind, e.cursor) for e in events] == [
        (EventKind.RESYNC, 300),
        (EventKind.RUN_DONE, 301),
    ]
    assert events[0].data["snapshot"]["status"] == "DONE"
    late = ch.subscribe(after_cursor=1)  # outside replay after the end: same shape
    assert [(e.kind, e.cursor) for e in await drain(late)] == [
        (EventKind.RESYNC, 300),
        (EventKind.RUN_DONE, 301),
    ]


async def test_readers_see_increasing_cursors_explicit_boundaries_and_one_terminal() -> None:
    ch = channel()
    fast, slow = ch.subscribe(0), ch.subscribe(0)
    gate = anyio.Event()
    seen: dict[str, list[Event]] = {"fast": [], "slow": []}

    async def read(name: str, sub: Subscription, stop_after: int | None) -> None:
        async for event in sub:
            seen[name].append(event)
            if len(seen[name]) == stop_after:
                await gate.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read, "fast", fast, None)
        tg.start_soon(read, "slow", slow, 10)
        for i in range(700):
            await ch.publish(EventKind.TOKEN if i % 3 else EventKind.NODE_STARTED, {"i": i})
            await anyio.lowlevel.checkpoint()
            if i == 600:
                gate.set()
        await ch.publish(EventKind.RUN_DONE)

    for name, events in seen.items():
        cursors = [e.cursor for e in events]
        for prev, cur in itertools.pairwise(events):
            if cur.kind == EventKind.RESYNC:  # an explicit boundary may skip ahead
                assert cur.cursor > prev.cursor, name
            else:  # otherwise no gap: the next event follows the last one or the boundary
                assert cur.cursor == prev.cursor + 1, name
        assert cursors[-1] == 701 and events[-1].kind == EventKind.RUN_DONE
        assert sum(e.terminal for e in events) == 1
    assert fast.resyncs == 0
    assert slow.resyncs == 1
    assert [e.kind for e in seen["slow"]].count(EventKind.RESYNC) == 1


# -- bad cursors -------------------------------------------------------------------------


async def test_cursor_from_the_future_raises_a_typed_error_naming_both_cursors() -> None:
    ch = channel()
    await publish_many(ch, 3)
    with pytest.raises(CursorFromFuture) as caught:
        ch.subscribe(after_cursor=9)
    assert isinstance(caught.value, RuntimeEngineError)
    assert (caught.value.cursor, caught.value.current, caught.value.run_id) == (9, 3, RUN)
    assert "cursor 9" in str(caught.value) and "current cursor 3" in str(caught.value)
    assert ch.subscriber_count == 0


async def test_negative_cursor_is_refused_with_a_typed_error() -> None:
    ch = channel()
    with pytest.raises(InvalidCursor, match=r"cursor -1 .* is negative"):
        ch.subscribe(after_cursor=-1)


async def test_resync_kind_cannot_be_published() -> None:
    ch = channel()
    with pytest.raises(ReservedKind, match="'resync'"):
        await ch.publish(EventKind.RESYNC, {})
    assert ch.cursor == 0


# -- terminal ----------------------------------------------------------------------------


async def test_channel_accepts_exactly_one_terminal_event() -> None:
    ch = channel()
    sub = ch.subscribe(0)
    await ch.publish(EventKind.NODE_STARTED)
    done = await ch.publish(EventKind.RUN_DONE, {"result": {"x": 1}})

    assert done.terminal and done.cursor == 2
    assert ch.terminal == done
    events = await drain(sub)
    assert [e.kind for e in events] == [EventKind.NODE_STARTED, EventKind.RUN_DONE]
    assert sub.done and not sub.cut_off
    assert await drain(ch.subscribe(after_cursor=2)) == []  # already saw the end


@pytest.mark.parametrize(
    "late_kind",
    [EventKind.NODE_STARTED, EventKind.TOKEN, EventKind.RUN_DONE, EventKind.RUN_FAILED],
)
async def test_event_after_the_terminal_event_is_rejected(late_kind: str) -> None:
    ch = channel()
    sub = ch.subscribe(0)
    await ch.publish(EventKind.RUN_CANCELLED)
    with pytest.raises(EventAfterTerminal) as caught:
        await ch.publish(late_kind)
    assert (caught.value.kind, caught.value.terminal_kind) == (late_kind, EventKind.RUN_CANCELLED)
    assert caught.value.terminal_cursor == 1
    assert ch.cursor == 1
    assert [e.kind for e in await drain(sub)] == [EventKind.RUN_CANCELLED]


# -- closing -----------------------------------------------------------------------------


async def test_channel_closes_after_subscribers_drain() -> None:
    ch = channel()
    readers = [ch.subscribe(0), ch.subscribe(0)]
    await publish_many(ch, 3)
    await ch.publish(EventKind.RUN_DONE)
    closed_at: list[float] = []

    async def close() -> None:
        await ch.close(grace=60)
        closed_at.append(anyio.current_time())

    with anyio.fail_after(HANG_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(close)
            await anyio.wait_all_tasks_blocked()
            assert not ch.closed  # waits for the readers, not just for time
            assert len(await drain(readers[0])) == 4
            await anyio.wait_all_tasks_blocked()
            assert not ch.closed
            assert len(await drain(readers[1])) == 4
    assert ch.closed and closed_at
    assert not any(r.cut_off for r in readers)
    assert ch.subscriber_count == 0


async def test_channel_closes_after_grace_with_a_stuck_reader() -> None:
    assert CLOSE_GRACE_S == 5.0
    assert inspect.signature(RunChannel.close).parameters["grace"].default == CLOSE_GRACE_S
    ch = channel()
    stuck = ch.subscribe(0)
    await publish_many(ch, 2)
    await ch.publish(EventKind.RUN_FAILED, {"error": "boom"})

    with anyio.fail_after(HANG_S):
        start = anyio.current_time()
        await ch.close(grace=0.05)
    assert anyio.current_time() - start >= 0.04
    assert ch.closed and stuck.cut_off and stuck.done
    assert await drain(stuck) == []


async def test_closed_channel_refuses_subscribers_and_events() -> None:
    ch = channel()
    await ch.close()  # no terminal event: nobody can drain, it closes at once
    assert ch.closed
    with pytest.raises(ChannelClosed, match="subscribe"):
        ch.subscribe(0)
    with pytest.raises(ChannelClosed, match="publish"):
        await ch.publish(EventKind.NODE_STARTED)


async def test_a_reader_that_leaves_does_not_hold_up_close() -> None:
    ch = channel()
    async with ch.subscribe(0) as sub:
        await ch.publish(EventKind.NODE_STARTED)
        await anext(sub)
    assert ch.subscriber_count == 0
    await ch.publish(EventKind.RUN_DONE)
    with anyio.fail_after(HANG_S):
        await ch.close(grace=60)
    assert ch.closed


async def test_subscribers_per_channel_are_bounded() -> None:
    ch = channel(max_subscribers=2)
    ch.subscribe(0)
    ch.subscribe(0)
    with pytest.raises(CapacityExceeded, match="at most 2"):
        ch.subscribe(0)


# -- metadata is detached at every boundary ------------------------------------------------


def test_detach_shares_no_mutable_object_at_any_depth() -> None:
    from runtime.events.model import detach

    original: dict[str, Any] = {"a": [1, {"b": [2.5, None, True]}], "t": ([3],), "s": {4}}
    copied = detach(original)
    assert copied == original
    copied["a"][1]["b"].append("x")
    copied["t"][0].append("y")
    copied["s"].add(5)
    assert original == {"a": [1, {"b": [2.5, None, True]}], "t": ([3],), "s": {4}}


async def test_metadata_is_copied_at_publish() -> None:
    ch = channel()
    sub = ch.subscribe(0)
    data: dict[str, Any] = {"tags": ["a"], "inner": {"k": 1}}
    returned = await ch.publish(EventKind.NODE_STARTED, data)
    data["tags"].append("publisher")
    returned.data["inner"]["k"] = 99

    assert (await anext(sub)).data == {"tags": ["a"], "inner": {"k": 1}}


async def test_metadata_is_copied_for_each_subscriber_and_for_replay() -> None:
    ch = channel()
    first, second = ch.subscribe(0), ch.subscribe(0)
    await ch.publish(EventKind.NODE_COMPLETED, {"state": {"items": [1, 2]}})

    mine = await anext(first)
    mine.data["state"]["items"].append("mutated")
    assert (await anext(second)).data == {"state": {"items": [1, 2]}}
    replayed = await anext(ch.subscribe(0))
    assert replayed.data == {"state": {"items": [1, 2]}}
    replayed.data["state"].clear()
    assert (await anext(ch.subscribe(0))).data == {"state": {"items": [1, 2]}}


async def test_metadata_is_copied_into_the_resync_snapshot() -> None:
    record = Record()
    ch = channel(record, replay_limit=4)
    await publish_many(ch, 10)
    a, b = ch.subscribe(0), ch.subscribe(0)

    snap = (await anext(a)).data["snapshot"]
    snap["nodes"]["done"].append("reader a")
    snap["status"] = "FORGED"
    assert record.value == {"id": str(RUN), "status": "RUNNING", "nodes": {"done": []}}
    assert (await anext(b)).data["snapshot"] == record.value
    terminal = await ch.publish(EventKind.RUN_DONE, {"r": [1]})
    terminal.data["r"].append(2)
    held = ch.terminal
    assert held is not None and held.data == {"r": [1]}
    held.data["r"].append(3)
    assert ch.terminal is not None and ch.terminal.data == {"r": [1]}


# -- the bus -----------------------------------------------------------------------------


async def test_bus_opens_one_channel_per_run_and_reuses_it_while_open() -> None:
    bus = EventBus()
    first, second = Record(), Record()
    second.value["status"] = "RESUMED"
    ch = bus.open(RUN, first)
    await ch.publish(EventKind.RUN_PARKED)
    again = bus.open(RUN, second)  # a later hop of the same Run in this process
    assert again is ch and bus.get(RUN) is ch and RUN in bus
    assert again.snapshot()["status"] == "RESUMED"
    assert bus.get(UUID(int=8)) is None

    await ch.publish(EventKind.RUN_DONE)
    await bus.close(RUN, grace=0)
    assert ch.closed and bus.get(RUN) is None and len(bus) == 0
    replacement = bus.open(RUN, first)
    assert replacement is not ch and replacement.cursor == 0


async def test_bus_discard_only_removes_the_named_channel() -> None:
    bus = EventBus()
    old = bus.open(RUN, Record())
    await old.close()
    new = bus.open(RUN, Record())
    bus.discard(RUN, old)  # a late discard of the old channel leaves the new one
    assert bus.get(RUN) is new
    bus.discard(RUN)
    assert bus.get(RUN) is None
    bus.discard(RUN)  # idempotent


async def test_bus_gives_its_channels_its_subscriber_bound() -> None:
    bus = EventBus(max_subscribers=1)
    ch = bus.open(UUID(int=1), Record())
    ch.subscribe(0)
    with pytest.raises(CapacityExceeded, match="at most 1"):
        ch.subscribe(0)
    with pytest.raises(ValueError, match="positive"):
        EventBus(max_subscribers=0).open(UUID(int=2), Record())


async def test_bus_is_bounded_and_evicts_closed_channels_first() -> None:
    bus = EventBus(max_channels=2)
    a = bus.open(UUID(int=1), Record())
    bus.open(UUID(int=2), Record())
    with pytest.raises(CapacityExceeded, match="at most 2"):
        bus.open(UUID(int=3), Record())
    await a.close()
    bus.open(UUID(int=3), Record())
    assert bus.get(UUID(int=1)) is None and len(bus) == 2


async def test_a_late_hop_cannot_unhook_the_current_hops_writer() -> None:
    """Seed 000: a parked hop's channel is reused by the resumed hop; when the old
    hop finishes late it detaches only its own writer, never the new one."""
    from uuid import uuid4

    from runtime.events.channel import RunChannel

    class Sink:
        def __init__(self) -> None:
            self.kinds: list[str] = []

        async def write(self, event: Any) -> None:
            self.kinds.append(event.kind)

    old, new = Sink(), Sink()
    channel = RunChannel(uuid4(), lambda: {}, sink=old)
    channel.attach(new)  # the resumed hop took the channel over
    channel.detach(old)  # the parked hop finishes late
    await channel.publish("run.done", {})
    assert new.kinds == ["run.done"] and old.kinds == []
    channel.detach(new)
    assert channel.snapshot() == {}
