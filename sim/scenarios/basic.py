"""Scenario `basic`: clients submit `echo` and `two_step` Runs with random
priorities, sessions and idempotency keys, including exact replays and
conflicting reuse, some with a caller-retention hook, under crashes and faults."""

from __future__ import annotations

from sim.scenarios import Scenario, register
from sim.scenarios.workload import settle_client, submit_stream
from sim.world import World


async def drive(world: World) -> None:
    await submit_stream(world, ("echo", "two_step"))


BASIC = register(Scenario("basic", __doc__ or "", drive, settle_client))
