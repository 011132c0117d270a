"""Scenario `runtime_mutation`: clients submit `echo`, `two_step` and `chatty`
(token deltas: a few seconds, or half of the time past the 120 s heartbeat)
Runs while a maintainer applies runtime mutations to the live Vessel at random
moments (runtime.mutation.pause_queues: close the pre-claim
gate, drain the hops in flight, hold the change a while, reopen), under
crashes and faults."""

from __future__ import annotations

from typing import Any

import anyio

from runtime.mutation import DrainTimeout, pause_queues
from sim.faults.options import FaultOptions
from sim.scenarios import Scenario, register
from sim.scenarios.workload import settle_client, submit_stream
from sim.world import Boot, World

DRAIN_TIMEOUT_S = 10.0
"""Shorter than runtime.mutation's default, so drains that give up happen too."""
SLOW_COMMITS = 0.1
"""At least this share of ledger calls is slow (sim.faults' latency)."""


class Mutator:
    """Applies runtime mutations to whichever boot is live."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def run(self, until: float) -> None:
        rng = self.world.streams.actors
        while anyio.current_time() < until:
            await anyio.sleep(round(rng.uniform(1.0, 8.0), 3))
            boot = self.world.live_boot
            if boot is None or self.world.injector.healed:
                continue
            await self.mutate(boot, round(rng.uniform(0.5, 3.0), 3))

    async def mutate(self, boot: Boot, hold_s: float) -> None:
        checks, boot_id = self.world.checker.mutation_checks, boot.id
        outcome = "applied"
        try:
            async with pause_queues(boot.worker, drain_timeout_s=DRAIN_TIMEOUT_S):
                self.world.checker._guarded(lambda: checks.change_began(boot_id))
                try:
                    await anyio.sleep(hold_s)
                finally:
                    checks.change_ended()
        except DrainTimeout:
            outcome = "drain_timeout"
            if boot.alive:  # a boot that died meanwhile drained nothing honestly or not
                self.world.checker._guarded(lambda: checks.drain_timed_out(boot_id))
        self.world.trace.emit("mutator", "mutation", boot=boot_id, outcome=outcome,
                              hold_s=hold_s)


def _slow_commits(options: FaultOptions) -> FaultOptions:
    """Slow commits are what a drain must wait out: a claim still in flight."""
    return options.model_copy(update={
        "latency_per_transaction": max(options.latency_per_transaction, SLOW_COMMITS)})


LONG_TOKENS = 2600
"""A chatty hop this long (2600 x 0.05 s) outlives the broker's 120 s heartbeat:
only its touches keep the sweep off its job."""


def _content(world: World, pattern: str) -> dict[str, Any]:
    if pattern != "chatty":
        return {}
    return {"tokens": LONG_TOKENS if world.streams.workload.random() < 0.5 else 50}


async def drive(world: World) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(Mutator(world).run, anyio.current_time() + 400.0)
        await submit_stream(world, ("echo", "two_step", "chatty"), _content)
        tg.cancel_scope.cancel()


RUNTIME_MUTATION = register(
    Scenario("runtime_mutation", " ".join((__doc__ or "").split()), drive, settle_client,
             tune=_slow_commits)
)
