"""MemoryBroker: SAQ's observable semantics in process memory.

What it reproduces of SAQ's PostgreSQL queue (NOTES-dependencies.md):
- a key is deduplicated while its job is queued, active or aborting, and a
  finished key is not silently reused (publish returns False);
- lower priority values are dequeued first, ties in publish order;
- statuses queued, active, aborting, aborted, failed, complete;
- abort: a queued job is aborted at once; an active or aborting one becomes
  aborting (which, like SAQ's update, refreshes its heartbeat) and only the
  worker running it cancels the hop (polled every second); the job then ends
  aborted with the abort's reason as its error; a finished job is left as it
  is (SaqBroker's abort is guarded the same way);
- a running job is touched by its hop; a sweep every 60 s aborts active or
  aborting jobs untouched for longer than their heartbeat (error "swept"),
  and a hop still running for a swept job is cancelled by its worker;
- retries=0: a swept or failed job is never re-queued;
- a dequeue stamps the job with the serving worker's boot (JobInfo.boot_id),
  and `retire` ends a dead boot's job as aborted at once (issue 15, M11).

`serve_queue` is written against `BrokerOps`, the broker's primitive
operations, so a simulator proxy can run the same loop over its own guarded
operations.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import anyio

from runtime.adapters.memory.gate import enter
from runtime.seams import Clock, HopHandler, JobInfo, JobStatus

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 60.0
ABORT_POLL_S = 1.0
SWEPT = "swept"


class BrokerOps(Protocol):
    """Primitive broker operations the serve loop is built on."""

    async def dequeue(self, queue: str, boot_id: str | None = None) -> JobInfo | None: ...

    async def finish(self, key: str, status: JobStatus, error: str | None = None) -> None: ...

    async def probe(self, key: str) -> JobInfo | None: ...

    async def sweep(self, queue: str) -> list[str]: ...

    async def wait_for_work(self, queue: str, timeout: float) -> None: ...


@dataclass
class _Job:
    info: JobInfo
    heartbeat: int
    order: int
    visible_at: float


class JobTable(dict[str, _Job]):
    """The broker's jobs by key, with an index of the QUEUED ones by queue.

    A dequeue takes the first QUEUED job of its queue; scanning every job the
    broker ever held for it cost each dequeue O(all jobs). `queued` holds, per
    queue, the QUEUED jobs in the order they were added to the table (the only
    way a job becomes QUEUED is its publish), so a dequeue reads only those. The
    table is shared by every broker built over it (`MemoryBroker(clock, jobs=...)`:
    two processes over one queue's tables), and so is the index. Every way a job
    enters or leaves the table keeps the index; a job's status changes only
    through `MemoryBroker._set`, which calls `restatus`."""

    __slots__ = ("queued",)

    def __init__(self, jobs: dict[str, _Job] | None = None) -> None:
        super().__init__()
        self.queued: dict[str, dict[str, _Job]] = {}
        for key, job in (jobs or {}).items():
            self[key] = job

    def __setitem__(self, key: str, job: _Job) -> None:
        if key in self:
            self._unindex(key, self[key].info)
        super().__setitem__(key, job)
        self._index(key, job)

    def __delitem__(self, key: str) -> None:
        self._unindex(key, self[key].info)
        super().__delitem__(key)

    def pop(self, key: str, *default: object) -> _Job:
        if key in self:
            self._unindex(key, self[key].info)
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, _Job]:
        key, job = super().popitem()
        self._unindex(key, job.info)
        return key, job

    def clear(self) -> None:
        super().clear()
        self.queued.clear()

    def setdefault(self, key: str, default: _Job) -> _Job:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: object, **kwargs: _Job) -> None:
        for key, job in dict(*args, **kwargs).items():
            self[key] = job

    def __ior__(self, other: object) -> JobTable:  # type: ignore[override,misc]
        self.update(other)
        return self

    def restatus(self, key: str, before: JobInfo, job: _Job) -> None:
        """`job`'s info changed from `before`: move it in or out of the index."""
        if self.get(key) is not job:
            return  # no longer in this table (cleared): nothing indexed
        self._unindex(key, before)
        self._index(key, job)

    def _index(self, key: str, job: _Job) -> None:
        if job.info.status is JobStatus.QUEUED:
            self.queued.setdefault(job.info.queue, {})[key] = job

    def _unindex(self, key: str, info: JobInfo) -> None:
        if info.status is JobStatus.QUEUED:
            self.queued.get(info.queue, {}).pop(key, None)

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles are plain dicts
        return (dict, (dict(self),))


@dataclass
class MemoryBroker:
    clock: Clock
    jobs: JobTable = field(default_factory=JobTable)
    """Pass another broker's `jobs` to share its tables (the index comes with them)."""
    _order: int = 0
    _wakeups: dict[str, anyio.Event] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.jobs, JobTable):
            self.jobs = JobTable(self.jobs)

    def _now(self) -> float:
        return self.clock.now().timestamp()

    # -- the Broker seam -----------------------------------------------------

    async def publish(
        self,
        queue: str,
        key: str,
        *,
        run_id: UUID,
        seq: int,
        priority: int,
        heartbeat: int,
        delay: float = 0.0,
    ) -> bool:
        await enter()
        if key in self.jobs:
            return False  # live keys deduplicate; finished keys are never reused
        self._order += 1
        now = self._now()
        info = JobInfo(
            key=key, queue=queue, status=JobStatus.QUEUED, priority=priority, run_id=run_id,
            seq=seq,
        )
        self.jobs[key] = _Job(info, heartbeat, self._order, visible_at=now + delay)
        self._wake(queue)
        return True

    async def probe(self, key: str) -> JobInfo | None:
        await enter()
        job = self.jobs.get(key)
        return job.info if job else None

    async def abort(self, key: str, reason: str) -> JobInfo | None:
        await enter()
        job = self.jobs.get(key)
        if job is None:
            return None
        if job.info.status is JobStatus.QUEUED:
            self._set(job, status=JobStatus.ABORTED, error=reason)
        elif not job.info.status.finished:
            self._set(job, status=JobStatus.ABORTING, error=reason, touched_at=self._now())
        return job.info

    async def touch(self, key: str) -> None:
        await enter()
        job = self.jobs.get(key)
        if job is not None and job.info.status is JobStatus.ACTIVE:
            self._set(job, touched_at=self._now())

    async def retire(self, key: str, reason: str) -> JobInfo | None:
        await enter()
        job = self.jobs.get(key)
        if job is None:
            return None
        if not job.info.status.finished:
            self._set(job, status=JobStatus.ABORTED, error=reason)
        return job.info

    async def serve(
        self, queue: str, handler: HopHandler, concurrency: int, *, boot_id: str | None = None
    ) -> None:
        await serve_queue(self, queue, handler, concurrency, boot_id=boot_id)

    # -- primitives ------------------------------------------------------------

    async def dequeue(self, queue: str, boot_id: str | None = None) -> JobInfo | None:
        await enter()
        now = self._now()
        ready = [j for j in self.jobs.queued.get(queue, {}).values() if j.visible_at <= now]
        if not ready:
            return None
        job = min(ready, key=lambda j: (j.info.priority, j.order))
        self._set(job, status=JobStatus.ACTIVE, started_at=now, touched_at=now, boot_id=boot_id)
        return job.info

    async def finish(self, key: str, status: JobStatus, error: str | None = None) -> None:
        await enter()
        job = self.jobs.get(key)
        if job is not None and not job.info.status.finished:
            self._set(job, status=status, error=error)

    async def sweep(self, queue: str) -> list[str]:
        await enter()
        now = self._now()
        swept = []
        for key in sorted(self.jobs):
            job = self.jobs[key]
            info = job.info
            stale = info.touched_at is not None and now - info.touched_at > job.heartbeat
            if (
                info.queue == queue
                and info.status in (JobStatus.ACTIVE, JobStatus.ABORTING)
                and job.heartbeat
                and stale
            ):
                self._set(job, status=JobStatus.ABORTED, error=SWEPT)
                swept.append(key)
        return swept

    async def wait_for_work(self, queue: str, timeout: float) -> None:
        now = self._now()
        pending = [j.visible_at - now for j in self.jobs.queued.get(queue, {}).values()]
        if pending:
            timeout = max(0.0, min([timeout, *pending]))
        event = self._wakeups.get(queue)
        if event is None or event.is_set():
            event = self._wakeups[queue] = anyio.Event()
        with anyio.move_on_after(timeout):
            await event.wait()

    # -- helpers ---------------------------------------------------------------

    def _set(self, job: _Job, **changes: object) -> None:
        before = job.info
        job.info = before.model_copy(update=changes)
        if job.info.status is not before.status:
            self.jobs.restatus(before.key, before, job)

    def _wake(self, queue: str) -> None:
        event = self._wakeups.get(queue)
        if event is not None:
            event.set()

    def statuses(self) -> dict[str, JobStatus]:
        return {k: self.jobs[k].info.status for k in sorted(self.jobs)}


async def serve_queue(
    ops: BrokerOps,
    queue: str,
    handler: HopHandler,
    concurrency: int,
    now: Callable[[], float] = anyio.current_time,
    *,
    boot_id: str | None = None,
) -> None:
    """Consume `queue` until cancelled, at most `concurrency` hops at once,
    stamping each job dequeued with `boot_id`."""
    limiter = anyio.Semaphore(concurrency)
    next_sweep = now()
    async with anyio.create_task_group() as tg:
        while True:
            if now() >= next_sweep:
                await ops.sweep(queue)
                next_sweep = now() + SWEEP_EVERY_S
            await limiter.acquire()
            job = await ops.dequeue(queue, boot_id)
            if job is None:
                limiter.release()
                await ops.wait_for_work(queue, max(0.0, next_sweep - now()))
                continue
            tg.start_soon(_run_job, ops, job, handler, limiter)


async def _run_job(
    ops: BrokerOps, job: JobInfo, handler: HopHandler, limiter: anyio.Semaphore
) -> None:
    aborted: list[str] = []
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_abort, ops, job.key, tg.cancel_scope, aborted)
            try:
                await handler(job.run_id, job.seq)
            except Exception as exc:
                log.warning("hop %s failed: %r", job.key, exc)
                await ops.finish(job.key, JobStatus.FAILED, error=repr(exc))
            else:
                await ops.finish(job.key, JobStatus.COMPLETE)
            tg.cancel_scope.cancel()
        if aborted:
            await ops.finish(job.key, JobStatus.ABORTED, error=aborted[0])
    finally:
        limiter.release()


async def _watch_abort(
    ops: BrokerOps, key: str, scope: anyio.CancelScope, aborted: list[str]
) -> None:
    """The worker's abort timer: cancel the hop once its job is aborting or aborted.

    Like SAQ's worker, an aborted job (a sweep) cancels a hop still running
    too; the reason recorded is the job's error ("abort" when it has none).
    """
    while True:
        await anyio.sleep(ABORT_POLL_S)
        info = await ops.probe(key)
        if info is not None and info.status in (JobStatus.ABORTING, JobStatus.ABORTED):
            aborted.append(info.error or "abort")
            scope.cancel()
            return
