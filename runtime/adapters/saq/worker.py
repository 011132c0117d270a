"""An in-process SAQ worker and a shutdown that proves its tasks ended.

Seed 000_81a5c720b14d934a.txt, "Topology and limits": the `runs` and `rites`
workers live in the Vessel's own process and event loop, so they must not
take over the process's signal handlers (`SIGNALS = []`; SAQ's `start()`
would otherwise install SIGINT/SIGTERM handlers and raise outside the main
thread).

Seed 000, "Cancellation, mutation, and recovery" (shutdown paragraph):
returning from a worker's stop method is not proof that its tasks ended,
and SAQ 0.26.4's `Worker.stop()` has been seen to hang when a task loses
its cancellation (NOTES-dependencies.md). `stop_worker` therefore owns both
the stop coroutine and SAQ's launcher task, cancels the launcher, re-cancels
whatever is still alive after a grace period, and either proves that every
task it observed (launcher, stop, upkeep and process tasks, every hop task)
has ended within one deadline or raises `WorkerStopFailed` naming the
survivors, so the caller leaves the queue pools open instead of closing them
under a live task.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field
from typing import Any, ClassVar

from saq import Worker
from saq.types import Context

from runtime.errors import StopUnproven

log = logging.getLogger(__name__)

RECANCEL_EVERY_S = 0.5
STOP_GRACE_MARGIN_S = 3.0
"""Time beyond SAQ's own cancellation deadline for a normal stop (re-queueing a hop)."""


class WorkerStopFailed(StopUnproven):
    """Some observed worker task was still alive at the stop deadline."""

    def __init__(self, queue: str, alive: list[str], deadline_s: float) -> None:
        super().__init__(
            f"SAQ worker of queue {queue!r}: {len(alive)} task(s) still alive "
            f"{deadline_s:g} s after stop was requested: {', '.join(sorted(alive))}"
        )
        self.queue = queue
        self.alive = alive


class InProcessWorker(Worker[Context]):
    """A SAQ worker that leaves the process's signal handlers alone, and whose process
    tasks never end with an exception nobody retrieves."""

    SIGNALS: ClassVar[list[signal.Signals]] = []  # type: ignore[misc]

    async def process(self) -> bool:
        """SAQ's `process`, except that an error recording a job's end stays here.

        SAQ records a job whose function raised with `retry` or `finish` from inside
        its own `except`; when the database is unreachable just then (a hop that
        raised on that same outage), that call raises out of the process task,
        which nobody awaits: SAQ starts the next one from a done callback. The job
        stays active, so the sweep re-delivers it once its heartbeat lapses (seed
        000, exact claim and recovery); the error is logged, not left unretrieved.
        """
        try:
            return await super().process()
        except Exception:
            log.exception("SAQ could not record the end of a job on queue %s; its "
                          "sweep re-delivers the job", self.queue.name)
            return True


@dataclass(eq=False)
class ServedWorker:
    """One running worker: its queue name, SAQ worker, launcher task and live hop tasks."""

    queue: str
    worker: InProcessWorker
    launcher: asyncio.Task[None]
    hops: set[asyncio.Task[Any]] = field(default_factory=set)
    observed: set[asyncio.Task[Any]] = field(default_factory=set)
    """Every task the stop has seen; kept so a failed stop can be re-checked."""

    def survivors(self) -> list[asyncio.Task[Any]]:
        return [task for task in self.observed | self.hops if not task.done()]


async def stop_worker(
    served: ServedWorker, *, deadline_s: float, cancel_deadline_s: float
) -> None:
    """Stop `served` and prove every task it ever showed us has ended.

    Must run shielded from the caller's cancellation. Raises
    `WorkerStopFailed` when any observed task is alive at `deadline_s`.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + deadline_s
    grace_until = min(deadline, started + cancel_deadline_s + STOP_GRACE_MARGIN_S)
    worker = served.worker
    worker.event.set()  # from here on SAQ spawns no new process task
    observed = served.observed
    observed.update({served.launcher, *worker.tasks, *served.hops})
    stopper = loop.create_task(worker.stop(), name=f"saq-stop:{served.queue}")
    observed.add(stopper)
    served.launcher.cancel()
    while True:
        observed.update(worker.tasks)
        observed.update(served.hops)
        alive = {task for task in observed if not task.done()}
        now = loop.time()
        if not alive or now >= deadline:
            break
        if now >= grace_until:
            for task in alive:
                task.cancel()
        await asyncio.wait(alive, timeout=min(RECANCEL_EVERY_S, deadline - now))
    for task in observed:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.warning("SAQ worker task %s of %s ended with %r",
                        task.get_name(), served.queue, task.exception())
    alive = {task for task in observed if not task.done()}
    if alive:
        raise WorkerStopFailed(served.queue, [task.get_name() for task in alive], deadline_s)
