"""Scenario `withdrawn_jobs`: the `leased_jobs` world with workers that stall past
their lease more often, and an owner who now and then withdraws a job its
delegating Run cancelled (`JobStore.withdraw`, as
`runtime.adapters.leased_agents` does), often one whose lease lapsed while its
worker was frozen. A withdrawn job is failed with the owner's reason and
its lapsed attempt is closed, the expired-lease event numbered before the
failure in its attempt log (seed 004_85033eb8fc772f12.txt, "Leases and fences",
"Alpha.2 accounting"; judged by `attempt_log_numbered`)."""

from __future__ import annotations

from typing import cast

import anyio

from runtime.adapters.leased_agents import WITHDRAWN
from runtime.errors import LedgerUnavailable
from runtime.jobs.errors import JobError
from runtime.jobs.store import JobStore
from sim.faults.options import FaultOptions
from sim.leased import SimJobStore
from sim.scenarios import Scenario, leased_jobs, register
from sim.world import World

STALL_PER_CALL = 0.12
"""Chance a worker's store call or model call freezes it past its lease."""
WITHDRAW = 0.35
"""Chance the owner withdraws a job at each look (every 5-25 s)."""
LAPSED_FIRST = 0.7
"""Share of withdrawals aimed at a job whose lease lapsed, when there is one."""


def _stalling(options: FaultOptions) -> FaultOptions:
    return options.model_copy(update={"worker_stall_per_call": STALL_PER_CALL})


async def owner(world: World) -> None:
    """Withdraws an unfinished job now and then, preferring one with a lapsed lease."""
    store = cast(JobStore, SimJobStore(world, None))
    rng = world.streams.actors
    while True:
        await anyio.sleep(round(rng.uniform(5.0, 25.0), 3))
        if rng.random() >= WITHDRAW:
            continue
        now = world.clock.now()
        jobs = sorted(world.jobs.job_table.values(), key=lambda j: (j.created_at, j.id))
        open_jobs = [j for j in jobs if not j.state.terminal]
        lapsed = [j for j in open_jobs if j.lease_owner is not None and not j.leased_at(now)]
        pool = lapsed if lapsed and rng.random() < LAPSED_FIRST else open_jobs
        if not pool:
            continue
        job = rng.choice(pool)
        try:
            after = await store.withdraw(job.id, WITHDRAWN, now)
            outcome = after.state.value
        except (LedgerUnavailable, JobError) as exc:
            outcome = type(exc).__name__
        world.trace.emit("owner", "jobs.withdraw", job=job.id, lapsed=job in lapsed,
                         outcome=outcome)


async def drive(world: World) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(owner, world)
        await leased_jobs.drive(world)
        tg.cancel_scope.cancel()


WITHDRAWN_JOBS = register(Scenario("withdrawn_jobs", " ".join((__doc__ or "").split()),
                                   drive, leased_jobs.heal, vessel=False, tune=_stalling))
