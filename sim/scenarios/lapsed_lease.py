"""Scenario `lapsed_lease`: two leased-job workers under the seed's 90 s lease,
renewed every 20 s while a model call runs (seed 004_85033eb8fc772f12.txt,
"Leases and fences"). The evidence store is slow: on most claims the preserved
payload arrives with less than one renewal period of the lease left, so the
model call outlives the lease: its first renewal finds the lease lapsed, or
already taken by the other worker's claim, and the call is cancelled. Some
calls answer, with a reply or with a retryable error and its usage, at the very
instant that renewal learns the lease is gone: the worker must still hand the
answer to the store, which refuses the result but keeps the usage ("Alpha.2
accounting"). Quick calls finish inside the lease; every job ends staged,
failed or exhausted."""

from __future__ import annotations

import random
from typing import Any

import anyio

from runtime.jobs.models import RENEW_EVERY_S
from sim.leased import SimJobStore
from sim.processes import supervise
from sim.scenarios import Scenario, leased_jobs, register
from sim.scenarios.leased_jobs import Producer, work
from sim.world import World

SLOW_FETCH = 0.8
"""Share of claims whose evidence arrives with 0.5-19.5 s of the lease left."""
QUICK, AT_LOSS = 0.25, 0.5
"""Shares of model calls that take 0.5-12 s and that answer exactly one renewal period
after they started; the rest (0.25) take 25-40 s, inside the 45 s deadline."""
OVERLOADED = 0.5
"""Share of the calls answering at the renewal that answer a retryable error with usage."""


def pace(rng: random.Random) -> tuple[float, bool]:
    """One model call's duration and whether the model answers overloaded."""
    roll = rng.random()
    if roll < QUICK:
        return round(rng.uniform(0.5, 12.0), 3), False
    if roll < QUICK + AT_LOSS:
        # The renewal sleeps RENEW_EVERY_S from the call's start, then learns its fate in
        # one store step; the answer crosses the network in one step too.
        return RENEW_EVERY_S, rng.random() < OVERLOADED
    return round(rng.uniform(RENEW_EVERY_S + 5.0, RENEW_EVERY_S + 20.0), 3), False


class SlowEvidenceStore(SimJobStore):
    """A worker's JobStore seam whose evidence reads are slow on most claims."""

    async def evidence(self, evidence_id: Any) -> Any:
        world, claimed = self.world, self.claimed
        job = world.jobs.job_table.get(claimed[0]) if claimed is not None else None
        rng = world.streams.actors
        if job is not None and job.lease_expires_at is not None and rng.random() < SLOW_FETCH:
            left = (job.lease_expires_at - world.clock.now()).total_seconds()
            await anyio.sleep(max(0.0, round(left - rng.uniform(0.5, RENEW_EVERY_S - 0.5), 3)))
        return await self._tx("evidence", False, lambda: self.inner.evidence(evidence_id))


async def drive(world: World) -> None:
    for name in leased_jobs.WORKERS[:2]:
        world.spawn(supervise, world, name,
                    lambda proc: work(world, proc, pace=pace, store_type=SlowEvidenceStore))
    producer = Producer(world)
    world.actors["producer"] = producer
    await producer.run(world.streams.workload.randint(8, 16))
    await anyio.sleep(300.0)  # faults stay on while the workers catch up


LAPSED_LEASE = register(Scenario("lapsed_lease", " ".join((__doc__ or "").split()), drive,
                                 leased_jobs.heal, vessel=False))
