"""Invariant: a recovery acknowledges a dequeued job's publish (issue M9: the
recovery group's survivors).

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery": startup
and the delivery relay recover each QUEUED Run's exact delivery; a job that is
queued or was dequeued by a worker is retained, and "a missed acknowledgement
is recorded" (runtime.recovery.deliveries). One rule:

- `dequeued_publish_acknowledged`: a task that read a QUEUED Run's delivery row
  PENDING (its publish never acknowledged) and then probed that row's key and
  found the job dequeued (active with a trustworthy start, or aborting, and
  stamped with a worker's boot) asks the ledger to mark that delivery published,
  or asks the broker to retire the job (a dead boot's stranded job), before it
  reads another delivery row or probes another job. A ledger call of the task
  that fails meanwhile releases it (its visit was cut short).

The read and the obligation live in context variables and name the task that
made them (a task spawned meanwhile inherits the variables, never the read: a
worker's abort watcher probing its own job owes nothing), so concurrent visits
never see each other's. Reads state only; violations go through
`Checker.fail`.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING
from uuid import UUID

import trio

from runtime.models import DeliveryState, RunDelivery, RunStatus
from runtime.recovery.deliveries import trustworthy_start
from runtime.seams import JobInfo, JobStatus

if TYPE_CHECKING:
    from sim.checker import Checker

INVARIANTS = (
    ("dequeued_publish_acknowledged", "a recovery that finds a QUEUED Run's PENDING delivery's "
     "job dequeued by a worker marks the delivery published (or retires a dead boot's job) "
     "before it visits another delivery",
     "seed 000 'Cancellation, mutation, and recovery' (startup and the delivery relay retain a "
     "queued or dequeued job and record a missed acknowledgement)"),
)

_READ: ContextVar[tuple[trio.lowlevel.Task, RunDelivery | None] | None] = \
    ContextVar("sim_ack_read", default=None)
"""The task that last read a delivery row here, and the row as it read it."""
_OWED: ContextVar[tuple[UUID, int, str, int] | None] = ContextVar("sim_ack_owed", default=None)
"""(run, sequence, key, boot number) of the acknowledgement this task owes."""


def _owed() -> tuple[UUID, int, str, int] | None:
    """What this very task owes (a task spawned meanwhile inherits the variable, not
    the debt: the task's read must be its own)."""
    last = _READ.get()
    if last is None or last[0] is not trio.lowlevel.current_task():
        return None
    return _OWED.get()


def _judge(checker: Checker) -> None:
    owed = _owed()
    if owed is None:
        return
    _OWED.set(None)
    run_id, seq, key, boot = owed
    checker.fail("dequeued_publish_acknowledged", f"boot {boot} found the job {key} of QUEUED "
                 f"Run {run_id}'s PENDING delivery {seq} dequeued by a worker and moved on "
                 "without marking it published or retiring the job", boot=boot,
                 run=str(run_id), key=key)


def on_delivery_read(checker: Checker, delivery: RunDelivery | None) -> None:
    _judge(checker)
    _OWED.set(None)  # an inherited debt is not this task's
    _READ.set((trio.lowlevel.current_task(), delivery))


def on_probe_started(checker: Checker) -> None:
    _judge(checker)


def on_probed(checker: Checker, boot: int, key: str, info: JobInfo | None) -> None:
    last = _READ.get()
    if last is None or last[0] is not trio.lowlevel.current_task():
        return
    read = last[1]
    if info is None or read is None or read.key != key or read.state is not DeliveryState.PENDING:
        return
    run = checker.world.ledger.run_table.get(read.run_id)
    if run is None or run.status is not RunStatus.QUEUED or run.seq != read.seq:
        return
    if info.boot_id is None or info.status not in (JobStatus.ACTIVE, JobStatus.ABORTING):
        return
    if info.status is JobStatus.ACTIVE and not trustworthy_start(info.started_at):
        return
    _OWED.set((read.run_id, read.seq, key, boot))


def on_mark_published(run_id: UUID, seq: int) -> None:
    owed = _owed()
    if owed is not None and owed[:2] == (run_id, seq):
        _OWED.set(None)


def on_retire(key: str) -> None:
    owed = _owed()
    if owed is not None and owed[2] == key:
        _OWED.set(None)


def on_call_failed() -> None:
    """A ledger call of this task raised: its visit was cut short."""
    if _owed() is not None:
        _OWED.set(None)
