"""Scenario `long_stream`: chatty Runs whose token streams (270-400 tokens) outgrow the
runtime's own bounds of 256 events (the replay window and each reader's queue, seed
000_81a5c720b14d934a.txt "Events, settlement, and waits"; the `events` scenario
shrinks both to 64): watched readers stall past a full queue while the checker
looks at each event reaching them, readers join at the replay window's edge (a
backlog of exactly 256) and past cursor 256, and every reader that took the
terminal event reconnects from its last cursor as a client sends it back."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any
from uuid import UUID

import anyio

from runtime.events.errors import EventError
from runtime.models import RunStatus
from sim.scenarios import Scenario, register
from sim.scenarios.events import checked_subscribe, reconnect_at_end, running_runs
from sim.scenarios.workload import settle_client, submit_stream
from sim.world import Boot, Unavailable, World

if TYPE_CHECKING:
    from runtime.events.channel import RunChannel, Subscription
    from sim.checker import Checker

KINDS = ("fast", "edge", "late", "watched", "watched")
"""`fast`: from cursor 0 (a resync once the stream passed the replay window); `edge`:
from 256 before the current cursor, the oldest the window still replays in full;
`late`: from the current cursor as a client stored it; `watched`: from the current
cursor, then takes nothing for WATCH_S while every event reaching it is judged."""
TOKENS = (270, 400)
WATCH_S = (11.0, 20.0)
"""A watched reader's stall: 256 tokens take 12.8 s, so some stop just short of a full
queue and most go past it."""
REPLAY_BOUND = 256
"""The runtime's replay window (seed 000), the edge reader's distance."""
QUIET_BOUND_S = 90.0
"""How long the drive waits, after the last submission, for the streams to end."""


def content(world: World, pattern: str) -> dict[str, Any]:
    return {"tokens": world.streams.workload.randint(*TOKENS)}


def _after(kind: str, channel: RunChannel) -> int:
    """The cursor a reader of `kind` resumes after, as a client would send it (text
    parsed back to an int: never the channel's own int object)."""
    if kind == "edge":
        return int(str(max(0, channel.cursor - REPLAY_BOUND)))
    if kind in ("late", "watched"):
        return int(str(channel.cursor))
    return 0


async def follow(boot: Boot, run_id: UUID, name: str, kind: str) -> str:
    channel = boot.worker.bus.get(run_id)
    if channel is None:
        return "no-channel"
    after = _after(kind, channel)
    emit, run = boot.world.trace.emit, str(run_id)
    checker = boot.world.checker
    sub = checked_subscribe(boot, run_id, channel, name, after)
    if isinstance(sub, str):
        return sub
    watched = kind == "watched"
    try:
        async with sub:
            if watched:
                await _watch(sub, channel, name, checker, boot.world.streams.actors)
            async for event in sub:
                emit("subscriber", "sub.event", sub=name, run=run, cursor=event.cursor,
                     kind=event.kind)
    except EventError as exc:
        return type(exc).__name__
    checker.on_stream_end(name, sub, channel, slow=watched)
    reconnect_at_end(channel, name, sub.last_cursor, checker)
    return "ended"


async def _watch(sub: Subscription, channel: RunChannel, name: str, checker: Checker,
                 rng: random.Random) -> None:
    """Take nothing for a while; wake as each event reaches the reader (the channel
    signals its reader on every offer) and let the checker judge its queue."""
    with anyio.move_on_after(round(rng.uniform(*WATCH_S), 3)):
        while not sub.done:
            checker.on_unread(name, sub, channel)
            await sub._wake.wait()


async def subscribers(world: World, stop: anyio.Event) -> None:
    rng = world.streams.actors
    n = 0
    async with anyio.create_task_group() as tg:
        while not stop.is_set():
            await anyio.sleep(round(rng.uniform(0.5, 2.0), 3))
            live = running_runs(world)
            if not live:
                continue
            n += 1
            run_id, kind = rng.choice(live), rng.choice(KINDS)
            tg.start_soon(_one, world, run_id, f"sub-{n}-{kind}", kind)
        tg.cancel_scope.cancel()


async def _one(world: World, run_id: UUID, name: str, kind: str) -> None:
    try:
        outcome = await world.request(lambda boot: follow(boot, run_id, name, kind))
    except Unavailable:
        outcome = "connection lost"
    world.trace.emit("subscriber", "sub.done", sub=name, run=str(run_id), outcome=outcome)


async def _streams_end(world: World) -> None:
    """Until no Run is RUNNING or QUEUED (or QUIET_BOUND_S passed): the readers follow
    the long streams to their terminal events."""
    with anyio.move_on_after(QUIET_BOUND_S):
        while any(r.status in (RunStatus.RUNNING, RunStatus.QUEUED)
                  for r in world.ledger.run_table.values()):
            await anyio.sleep(1.0)


async def drive(world: World) -> None:
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(subscribers, world, stop)
        await submit_stream(world, ("chatty",), content, count=(3, 6))
        await _streams_end(world)
        stop.set()
        tg.cancel_scope.cancel()


def _group_commit(world: World) -> None:
    world.group_commit = True  # the Step writer batches its appends, as on PostgreSQL


LONG_STREAM = register(Scenario("long_stream", __doc__ or "", drive, settle_client,
                                setup=_group_commit))
