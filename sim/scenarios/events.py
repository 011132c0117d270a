"""Scenario `events`: Runs that stream hundreds of live tokens while fast,
slow, stalled and late subscribers follow them, one with a cursor from the future;
every subscriber's stream is checked for order, resync boundaries and a
single terminal event."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any
from uuid import UUID

import anyio

from runtime.events.channel import RunChannel, Subscription
from runtime.events.errors import EventError
from runtime.models import RunStatus
from sim import event_checks
from sim.scenarios import Scenario, register
from sim.scenarios.workload import settle_client, submit_stream
from sim.world import Boot, Unavailable, World

if TYPE_CHECKING:
    from sim.checker import Checker

KINDS = ("fast", "slow", "late", "future", "stalled")
"""`stalled`: subscribes, then reads nothing for STALL_S (a stream of 80 tokens), so
its queue overflows and its resync is often taken after the terminal event."""
STALL_S = 4.0
LIMITS = (64, 64, (3, 1))
"""Replay window and reader queue of the channels here, a quarter of the runtime's
256: a stream of a quarter of the tokens (and subscribers joining four times as
often) meets the same boundaries (a late reader outside the replay window, a slow
reader falling behind) at a quarter of the cost; the runtime's own limits are
exercised by tests/unit/test_event_bus.py. Readers per channel: 3 in the first
boot, so readers share a channel and some are refused for a full one, and 1 in
the next (the smallest bound a channel takes), alternating after each restart."""


def content(world: World, pattern: str) -> dict[str, Any]:
    if pattern == "chatty":
        return {"tokens": world.streams.workload.randint(25, 150)}
    return {}


async def follow(boot: Boot, run_id: UUID, name: str, kind: str, rng: random.Random) -> str:
    channel = boot.worker.bus.get(run_id)
    if channel is None:
        return "no-channel"
    after = {"late": 1, "future": channel.cursor + 1000}.get(kind, 0)
    pause = 0.2 if kind == "slow" else 0.0
    emit, run = boot.world.trace.emit, str(run_id)  # once, not for each of hundreds of events
    checker = boot.world.checker
    sub = checked_subscribe(boot, run_id, channel, name, after)
    if isinstance(sub, str):
        return sub
    try:
        async with sub:
            if kind == "stalled":
                await anyio.sleep(STALL_S)  # within the close grace of a terminal meanwhile
            async for event in sub:
                emit("subscriber", "sub.event", sub=name, run=run, cursor=event.cursor,
                     kind=event.kind)
                if pause:
                    await anyio.sleep(pause)
    except EventError as exc:
        return type(exc).__name__
    checker.on_stream_end(name, sub, channel, slow=bool(pause))
    reconnect_at_end(channel, name, sub.last_cursor, checker)
    return "ended"


def checked_subscribe(boot: Boot, run_id: UUID, channel: RunChannel, name: str,
                      after: int) -> Subscription | str:
    """Subscribe after cursor `after` as a client would, handing the checker the channel
    as `subscribe` found it and what it answered (synchronous: nothing moves in
    between). The Subscription, or the name of the refusal."""
    checker = boot.world.checker
    found = event_checks.before(channel)
    try:
        sub = channel.subscribe(after_cursor=after)
    except EventError as exc:
        checker.on_subscribe(name, after, found, None, exc)
        return type(exc).__name__
    checker.on_subscribe(name, after, found, sub, None)
    checker.event_checks.on_followed(boot, run_id, channel)
    return sub


def reconnect_at_end(channel: RunChannel, name: str, last: int, checker: Checker) -> None:
    """The reader reconnects from its last cursor once it has taken the terminal event
    (a client resuming where it stopped): it must be done at once, or refused if the
    channel closed meanwhile. The cursor comes back as a client sends it (the text of
    a Last-Event-ID header, parsed): an int equal to the channel's, never the same
    object, as a real reconnect's is past 256 (CPython shares only small ints).
    Synchronous and untraced: in either answer the channel does not change, so
    traces are unchanged."""
    terminal = channel._terminal
    if terminal is None or last < terminal.cursor:
        return
    last = int(str(last))
    found = event_checks.before(channel)
    try:
        again = channel.subscribe(after_cursor=last)
    except EventError as exc:
        checker.on_subscribe(f"{name}-again", last, found, None, exc)
        return
    checker.on_subscribe(f"{name}-again", last, found, again, None)
    if not again.done:
        again._finish()  # only a broken channel registers it: leave at once


def running_runs(world: World) -> list[UUID]:
    """The Runs RUNNING now, oldest first (a follower picks one to read)."""
    return [r.id for r in sorted(world.ledger.run_table.values(),
                                 key=lambda r: (r.created_at, r.id))
            if r.status is RunStatus.RUNNING]


async def subscribers(world: World, until: float) -> None:
    rng = world.streams.actors
    n = 0
    async with anyio.create_task_group() as tg:
        while anyio.current_time() < until:
            await anyio.sleep(round(rng.uniform(0.125, 1.0), 3))
            live = running_runs(world)
            if not live:
                continue
            n += 1
            run_id, kind = rng.choice(live), rng.choice(KINDS)
            tg.start_soon(_one, world, run_id, f"sub-{n}-{kind}", kind, rng)
        tg.cancel_scope.cancel()


async def _one(world: World, run_id: UUID, name: str, kind: str, rng: random.Random) -> None:
    try:
        outcome = await world.request(lambda boot: follow(boot, run_id, name, kind, rng))
    except Unavailable:
        outcome = "connection lost"
    world.trace.emit("subscriber", "sub.done", sub=name, run=str(run_id), outcome=outcome)


async def drive(world: World) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(subscribers, world, anyio.current_time() + 400.0)
        await submit_stream(world, ("chatty", "echo"), content)
        tg.cancel_scope.cancel()


def _limits(world: World) -> None:
    world.event_limits = LIMITS
    world.group_commit = True  # the Step writer batches its appends, as on PostgreSQL


EVENTS = register(Scenario("events", __doc__ or "", drive, settle_client, setup=_limits))
