"""Scenario `step_burst`: Runs whose one node publishes a burst of persisted events (120 to
220 `note` events, 10 ms apart) on a group-committing ledger whose Step appends often
stall, so a hop's lingering Step writer comes back from a stalled append with more than
a full group (64 Steps) queued behind it; beside them `two_step` Runs that an operator
cancels, some while their hop is paused at its applied effect, so a settlement that
carries the Steps the writer held is fenced and gives them back. Seed
000_81a5c720b14d934a.txt "Events, settlement, and waits" (non-token events become Step
rows in publish order, through a bounded queue) and issue 17, M14 (group commit and the
writer's linger: a full group ends a linger at once; a settlement that did not apply
gives its Steps back)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from runtime.hop import HopContext
from runtime.registry import Node, Pattern
from sim.scenarios import Scenario, register
from sim.scenarios.people import Operator
from sim.scenarios.workload import settle_client, stalled_appends, submit_stream

if TYPE_CHECKING:
    from sim.world import World

NOTES = (120, 220)
"""Persisted events per Run: more than a full group, fewer than the writer's queue
(256) can hold, so a stall fills the queue past a group without filling it."""
NOTE_GAP_S = 0.01
STALL_SHARE = 0.25
MAX_STALL_S = 2.0
"""A stalled append lasts up to 2 s: up to 200 notes queue behind it."""
OPERATOR_S = 200.0


async def _note(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
    """Publish `notes` persisted events (kind `note`: not a token, so each is a Step)."""
    count = int(state.get("notes", 0))
    for i in range(count):
        await ctx.publish("note", {"i": i})
        await anyio.sleep(NOTE_GAP_S)
    return {**state, "noted": count}


NOTED = Pattern(name="noted", version=1, nodes=(Node("note", _note),))
"""A simulator-only Pattern (registered by this scenario's setup)."""


def content(world: World, pattern: str) -> dict[str, Any]:
    if pattern != "noted":
        return {}
    return {"notes": world.streams.workload.randint(*NOTES)}


async def drive(world: World) -> None:
    """Noted Runs, and two_step Runs an operator sometimes cancels while their hop is
    paused at the applied effect: the hop's settlement, carrying the Steps its
    lingering writer held, is then fenced, and the writer gets them back."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(Operator(world, share=0.3).register().run,
                      anyio.current_time() + OPERATOR_S)
        await submit_stream(world, ("noted", "two_step"), content, count=(6, 14))
        tg.cancel_scope.cancel()


def _setup(world: World) -> None:
    world.group_commit = True  # the Step writer batches its appends and lingers
    world.registry.register(NOTED)


STEP_BURST = register(Scenario("step_burst", " ".join((__doc__ or "").split()), drive,
                          settle_client, tune=stalled_appends(STALL_SHARE, MAX_STALL_S),
                          setup=_setup))
