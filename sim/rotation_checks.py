"""A QUEUED Run whose hop job ended without a claim is handed out again.

Seed 000 ("Cancellation, mutation, and recovery": startup reconciliation and
the delivery relay): a job that finished (complete, failed or aborted) while
its Run still waits QUEUED at that job's sequence will never run the Run, and
a finished key is never published again. Recovery must rotate the Run to a
fresh sequence and publish that, never report such a job as still fencing.
The world reaches it when a worker's claim fails past the ledger retry budget
(FaultKind.CLAIM_STUCK): the hop raises, its job fails, and the Run is left
QUEUED behind it.

- `finished_job_rotated`: after heal no Run waits QUEUED at a delivery
  (PENDING or PUBLISHED) whose broker job is finished.

A read of the ledger and broker at rest: nothing here changes a trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.models import DeliveryState, RunStatus

if TYPE_CHECKING:
    from sim.checker import Checker

INVARIANTS = (
    ("finished_job_rotated", "a QUEUED Run whose current delivery's hop job finished "
     "without claiming it (its worker gave up) is rotated to a fresh sequence and published "
     "by startup or the delivery relay; it is never left behind the finished job",
     "seed 000 'Cancellation, mutation, and recovery' (startup reconciliation, relay)"),
)

OPEN = (DeliveryState.PENDING, DeliveryState.PUBLISHED)


def final(checker: Checker) -> None:
    world = checker.world
    deliveries = world.ledger.delivery_table
    for run in sorted(world.ledger.run_table.values(), key=lambda r: (r.created_at, r.id)):
        if run.status is not RunStatus.QUEUED:
            continue
        d = deliveries.get((run.id, run.seq))
        if d is None or d.state not in OPEN:
            continue
        job = world.broker.jobs.get(d.key)
        if job is not None and job.info.status.finished:
            checker.fail("finished_job_rotated", f"Run {run.id} waits QUEUED at {d.key}, "
                         f"whose job is {job.info.status.value}: never rotated",
                         key=d.key, job=job.info.status.value, error=job.info.error)
