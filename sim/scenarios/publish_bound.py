"""Scenario `publish_bound`: Runs whose one node floods its channel with persisted events
(`note`, no gap between them) behind Step appends that often stall for long, until a
publish comes back only at the hop's publish bound (the writer's bounded queue full behind
the stalled append); the node then returns at once, so the hop settles alone (its writer
busy past the fold wait) and publishes its terminal event while the queue is still full:
that publish gives up at the bound and the terminal Step stays unwritten, an evidence debt
the hop must record for the relay to pay. Some of those hops restart their boot as the
node returns, so the graceful shutdown cancels the hop while its last publish waits: the
node's outcome must still settle. Beside them `two_step` Runs that an operator
cancels. Seed 000_81a5c720b14d934a.txt "Events, settlement, and waits" (the terminal event
is best effort and bounded; an unwritten terminal Step is owed until repaired) and issue
18, M9 (HopEvents.publish's refusal counted as published survived mutation)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from runtime.events.hop import PUBLISH_BOUND_S
from runtime.hop import HopContext
from runtime.registry import Node, Pattern
from sim.mutation_checks import CURRENT_HOP
from sim.scenarios import Scenario, register
from sim.scenarios.people import Operator
from sim.scenarios.workload import settle_client, stalled_appends, submit_stream

if TYPE_CHECKING:
    from sim.world import World

MAX_NOTES = 400
"""More than the writer's queue (256) holds: a stall of the first appends fills it."""
STALL_SHARE = 0.25
MAX_STALL_S = 32.0
"""Longer than a note's bound, node.completed's bound, the fold wait and the terminal
event's bound together (16 s), often enough: the terminal publish then meets the queue
still full. The writer group-commits (64 Steps an append), so once the stall ends the
hop's terminal flush drains the queue in a few appends, well inside the broker's 120 s
heartbeat window (one Step an append, 256 of them at this stall rate, kept a settled hop
flushing past it: its job was swept while it lived, hop_heartbeat at swarm seeds 6, 28)."""
OPERATOR_S = 300.0
RESTART_SHARE = 0.8
"""Of the hops whose flood met the bound alone in their boot, those that restart it."""


def _maybe_restart(world: World) -> None:
    """Restart the hop's boot gracefully, sometimes, when this hop is the only one it
    runs: the shutdown then cancels this hop alone, as its node returns."""
    call = CURRENT_HOP.get()
    boot = world.live_boot
    if call is None or boot is None or boot.id != call.boot_id:
        return
    if any(c.boot_id == call.boot_id and c is not call
           for c in world.checker.mutation_checks.running):
        return
    if world.streams.actors.random() < RESTART_SHARE:
        world.trace.emit("operator", "restart", boot=boot.number)
        boot.stop()


def _flooded(world: World) -> Pattern:
    """A simulator-only Pattern (registered by this scenario's setup)."""

    async def flood(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
        """Publish up to MAX_NOTES persisted events; stop after one that waited out the
        bound. Some hops that stopped so restart their boot gracefully as they return:
        the shutdown cancels the hop while its node.completed publish still waits."""
        count = 0
        for i in range(MAX_NOTES):
            started = anyio.current_time()
            await ctx.publish("note", {"i": i})
            count += 1
            if anyio.current_time() - started >= PUBLISH_BOUND_S:
                _maybe_restart(world)
                break
        call = CURRENT_HOP.get()
        if call is not None:
            call.outcome_known = True
        return {**state, "noted": count}

    return Pattern(name="flooded", version=1, nodes=(Node("flood", flood),))


async def drive(world: World) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(Operator(world, share=0.3).register().run,
                      anyio.current_time() + OPERATOR_S)
        await submit_stream(world, ("flooded", "two_step"), count=(10, 18))
        tg.cancel_scope.cancel()


def _setup(world: World) -> None:
    world.group_commit = True  # the queue drains 64 Steps an append: a flush outlasts no heartbeat
    world.registry.register(_flooded(world))


PUBLISH_BOUND = register(Scenario("publish_bound", " ".join((__doc__ or "").split()), drive,
                          settle_client, tune=stalled_appends(STALL_SHARE, MAX_STALL_S),
                          setup=_setup))
