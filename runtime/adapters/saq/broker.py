"""SaqBroker: the Broker seam over SAQ's PostgreSQL queues `runs` and `rites`.

Seed 000_81a5c720b14d934a.txt, "Topology and limits": two fixed in-process
SAQ PostgreSQL queues, each on SAQ's own autocommit pool and SAQ's own
tables (`saq_jobs`, `saq_stats`, `saq_versions`), separate from the ledger's
pool. "Admission and exact claim": a hop is published as SAQ job
`perform_run(run_id, seq)` under its exact hop key, with the broker priority
the engine computed (`100 - doctrine priority`; SAQ dequeues lower values
first), `retries=0`, `timeout=0` and the given heartbeat (120 s), so an
abandoned active job is swept without a wall-clock limit on a valid graph.

What this adapter guarantees (and `MemoryBroker` models):

- publish returns True only when it created the job; an existing key of any
  status returns False and is left untouched, so no key is ever reused
  (`VesselQueue._enqueue`), and finished rows are kept (`ttl=0`) so a probe
  of an old hop keeps answering;
- abort is one transaction: a queued job is aborted at once, an active or
  aborting job becomes aborting (SAQ's update, which also refreshes its
  heartbeat) and only the worker running it cancels the hop; a finished
  job is left as it is, so an abort never makes a finished hop look live;
- touch refreshes the heartbeat of an active job only;
- a job dequeued by a served worker carries its boot (`VesselQueue`), and
  retire ends a dead boot's active or aborting job as aborted at once;
- database errors surface as `BrokerUnavailable`;
- `serve` runs an in-process SAQ worker until cancelled and then proves
  its tasks ended (`runtime.adapters.saq.worker`).

asyncio only: SAQ and psycopg do not run under trio.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from textwrap import dedent
from types import TracebackType
from typing import Any
from uuid import UUID

import anyio
import psycopg
import saq
from psycopg.sql import SQL, Identifier
from psycopg_pool import AsyncConnectionPool
from saq.job import Job, Status
from saq.queue.postgres import JOBS_TABLE
from saq.queue.postgres_migrations import get_migrations
from saq.types import Context, PartialTimersDict

from runtime.adapters.saq.queue import BOOT_META, VesselQueue
from runtime.adapters.saq.teardown import disconnect_in_reverse
from runtime.adapters.saq.worker import (
    InProcessWorker,
    ServedWorker,
    WorkerStopFailed,
    stop_worker,
)
from runtime.errors import BrokerUnavailable
from runtime.keys import parse_hop_key
from runtime.registry import QUEUES
from runtime.seams import Broker, HopHandler, JobInfo, JobStatus

log = logging.getLogger(__name__)

FUNCTION = "perform_run"
SAQ_PRIORITY_MAX = 32767
"""SAQ's priority column is a SMALLINT and its default dequeue range is 0-32767."""
DEQUEUE_WAKE_S = 1.0
"""The longest an idle worker slot waits on a notification before it looks again."""

_SELECT_JOB = dedent(
    """
    SELECT job, status, queue FROM {jobs_table} WHERE key = %(key)s {lock}
    """
)


@dataclass(frozen=True)
class SaqSettings:
    """Pool sizes, bounds and SAQ worker timers of one SaqBroker."""

    pool_min: int = 2
    pool_max: int = 10
    connect_timeout_s: float = 10.0
    """Bound on opening a connection and on waiting for one from a pool."""
    sweep_every_s: int = 60
    abort_poll_s: int = 1
    cancel_deadline_s: float = 5.0
    """How long SAQ waits for a cancelled hop before giving up on it."""
    stop_deadline_s: float = 30.0
    """The seed's single deadline within which every worker task must have ended."""
    ttl_s: int = 0
    """SAQ job ttl; 0 keeps finished rows, so their keys stay taken."""


class SaqBroker:
    """The production Broker: SAQ `PostgresQueue`s on their own pools."""

    def __init__(
        self,
        dsn: str,
        *,
        queues: Sequence[str] = QUEUES,
        settings: SaqSettings | None = None,
    ) -> None:
        self.dsn = dsn
        self.queue_names = tuple(queues)
        self.settings = settings or SaqSettings()
        self._queues: dict[str, VesselQueue] = {}
        self._serving: set[ServedWorker] = set()
        self._unproven: set[ServedWorker] = set()
        """Workers whose stop could not prove that every task ended."""

    # -- lifecycle ---------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return bool(self._queues)

    async def connect(self) -> None:
        """Connect every queue in order; on failure close those already connected.

        A DSN that cannot connect fails within `connect_timeout_s` with a
        `BrokerUnavailable` that carries the driver's message; no pool is
        left open. A SAQ schema newer than this SAQ fails the same way.
        """
        if self._queues:
            return
        await self._preflight()
        connected: dict[str, VesselQueue] = {}
        try:
            for name in self.queue_names:
                queue = self._build_queue(name)
                with anyio.fail_after(self.settings.connect_timeout_s * 2):
                    await queue.connect()
                connected[name] = queue
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                cleanup = await disconnect_in_reverse(connected)
            if cleanup.cancelled is not None:
                raise cleanup.cancelled from exc
            if isinstance(exc, (psycopg.Error, OSError, ValueError, TimeoutError)):
                raise BrokerUnavailable(f"SAQ queues could not connect: {exc}") from exc
            raise
        self._queues = connected

    async def disconnect(self) -> None:
        """Disconnect every queue in reverse order, attempting all of them.

        Refuses while a served worker has not been proven stopped (its tasks
        may still use the pools). A cancellation arriving meanwhile, anyio's
        or a plain `Task.cancel()`, is kept until the queue being closed has
        closed and every queue was attempted, then re-raised with the
        failures as its cause; without one, failures are raised together as
        one ExceptionGroup (`teardown.disconnect_in_reverse`).
        """
        if not self.stop_proven:
            names = sorted(s.queue for s in self._serving | self._unproven)
            raise BrokerUnavailable(
                f"SAQ workers of {names} are not proven stopped; the pools stay open"
            )
        queues, self._queues = self._queues, {}
        with anyio.CancelScope(shield=True):
            outcome = await disconnect_in_reverse(queues)
        outcome.raise_for_outcome("disconnecting SAQ queues")

    @property
    def stop_proven(self) -> bool:
        """No worker is serving and every stopped worker was proven to have ended.

        While this is False a task of some worker may still use the queue
        pools and, through its hop, every other shared service.
        """
        return not self._serving and not self._unproven

    async def __aenter__(self) -> SaqBroker:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.disconnect()

    def _build_queue(self, name: str) -> VesselQueue:
        s = self.settings
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.dsn,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(s.connect_timeout_s))},
            min_size=s.pool_min,
            max_size=s.pool_max,
            open=False,
            timeout=s.connect_timeout_s,
            check=AsyncConnectionPool.check_connection,
            name=f"saq-{name}",
        )
        return VesselQueue(
            pool=pool,
            name=name,
            min_size=s.pool_min,
            max_size=s.pool_max,
            manage_pool_lifecycle=True,
        )

    async def _preflight(self) -> None:
        """One direct connection, so a bad DSN fails fast with the server's own words."""
        timeout = self.settings.connect_timeout_s
        try:
            with anyio.fail_after(timeout + 1):
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, connect_timeout=max(1, int(timeout))
                )
                try:
                    stored = await _stored_schema_version(conn)
                finally:
                    await conn.close()
        except (psycopg.Error, OSError, TimeoutError) as exc:
            raise BrokerUnavailable(
                f"SAQ broker cannot reach PostgreSQL within {timeout:g} s: {exc}"
            ) from exc
        known = _known_schema_version()
        if stored is not None and stored > known:
            raise BrokerUnavailable(
                f"SAQ schema version {stored} (saq_versions) is newer than the {known} "
                f"this SAQ {saq.__version__} knows; refusing to use it"
            )

    def queue(self, name: str) -> VesselQueue:
        """The connected SAQ queue `name`; BrokerUnavailable when not connected."""
        if name not in self.queue_names:
            raise ValueError(f"unknown queue {name!r}; expected one of {self.queue_names}")
        queue = self._queues.get(name)
        if queue is None:
            raise BrokerUnavailable(f"SAQ queue {name!r} is not connected")
        return queue

    def _any_queue(self) -> VesselQueue:
        return self.queue(self.queue_names[0])

    # -- the Broker seam -------------------------------------------------------

    async def publish(
        self, queue: str, key: str, *, run_id: UUID, seq: int, priority: int, heartbeat: int
    ) -> bool:
        if not 0 <= priority <= SAQ_PRIORITY_MAX:
            raise ValueError(f"broker priority {priority} outside SAQ's 0-{SAQ_PRIORITY_MAX}")
        q = self.queue(queue)
        job = Job(
            function=FUNCTION,
            kwargs={"run_id": str(run_id), "seq": seq},
            key=key,
            priority=priority,
            retries=0,
            timeout=0,
            heartbeat=heartbeat,
            ttl=self.settings.ttl_s,
        )
        with _unavailable("publish", key):
            created = await q.enqueue(job)
        return created is not None

    async def probe(self, key: str) -> JobInfo | None:
        q = self._any_queue()
        with _unavailable("probe", key):
            async with q.pool.connection() as conn:
                row = await self._select(conn, q, key, lock=False)
        return None if row is None else _job_info(key, row)

    async def abort(self, key: str, reason: str) -> JobInfo | None:
        """Queued -> aborted now; active/aborting -> aborting; finished: unchanged."""
        return await self._stop(key, reason, op="abort", at_once=False)

    async def touch(self, key: str) -> None:
        """Refresh the heartbeat (`touched`) of an active job; anything else is left alone."""
        q = self._any_queue()
        with _unavailable("touch", key):
            async with q.pool.connection() as conn, conn.transaction():
                row = await self._select(conn, q, key, lock=True)
                if row is None or Status(row[1]) is not Status.ACTIVE:
                    return
                owner = self._owner(row)
                job = owner.deserialize(row[0], Status.ACTIVE)
                assert job is not None
                await owner.update(job, connection=conn)

    async def retire(self, key: str, reason: str) -> JobInfo | None:
        """Queued, active or aborting -> aborted now (the job's worker is dead)."""
        return await self._stop(key, reason, op="retire", at_once=True)

    async def _stop(self, key: str, reason: str, *, op: str, at_once: bool) -> JobInfo | None:
        """Under the job's row lock: a queued job, or any live one when `at_once`, is
        aborted now; another live job is marked aborting for its worker to end. A
        finished job is left as it is. None when no job has that key."""
        q = self._any_queue()
        with _unavailable(op, key):
            async with q.pool.connection() as conn, conn.transaction():
                row = await self._select(conn, q, key, lock=True)
                if row is None:
                    return None
                status = Status(row[1])
                if status in (Status.QUEUED, Status.ACTIVE, Status.ABORTING, Status.NEW):
                    owner = self._owner(row)
                    job = owner.deserialize(row[0], status)
                    assert job is not None
                    if at_once or status is Status.QUEUED:
                        await owner.finish(job, Status.ABORTED, error=reason, connection=conn)
                    else:
                        await owner.update(job, status=Status.ABORTING, error=reason,
                                           connection=conn)
                row = await self._select(conn, q, key, lock=False)
        assert row is not None
        return _job_info(key, row)

    async def serve(
        self, queue: str, handler: HopHandler, concurrency: int, *, boot_id: str | None = None
    ) -> None:
        """Run an in-process SAQ worker on `queue` until cancelled.

        At most `concurrency` hops run at once. On cancellation the worker
        is stopped under a shield and every task it showed is proven ended
        within `stop_deadline_s`; otherwise `WorkerStopFailed` is raised and
        the worker stays registered, so `disconnect` refuses to close the
        pools under it. If SAQ's worker exits on its own, BrokerUnavailable.
        """
        q = self.queue(queue)
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        q.dequeuing_boot = boot_id
        hops: set[asyncio.Task[Any]] = set()

        async def perform_run(ctx: Context, *, run_id: str, seq: int) -> object:
            task = asyncio.current_task()
            assert task is not None
            task.set_name(f"hop:run:{run_id}:{seq}")
            hops.add(task)
            try:
                return _jsonable(await handler(UUID(run_id), int(seq)))
            finally:
                hops.discard(task)

        s = self.settings
        timers: PartialTimersDict = {
            "schedule": 1,  # SAQ's default: a fallback dequeue poll every second
            "worker_info": 10,
            "sweep": s.sweep_every_s,
            "abort": s.abort_poll_s,
        }
        worker = InProcessWorker(
            q,
            functions=[(FUNCTION, perform_run)],
            concurrency=concurrency,
            timers=timers,
            cancellation_hard_deadline_s=s.cancel_deadline_s,
            # SAQ's listening dequeue wakes only on a notification; one sent before its
            # LISTEN is in place is lost, and a job the fallback poll dequeued meanwhile
            # waits in the worker's local queue for the next one. A bounded wait makes
            # every idle slot look at that queue again (and poll) at least this often.
            dequeue_timeout=DEQUEUE_WAKE_S,
        )
        launcher = asyncio.get_running_loop().create_task(
            worker.start(), name=f"saq-worker:{queue}"
        )
        served = ServedWorker(queue, worker, launcher, hops)
        self._serving.add(served)
        try:
            await asyncio.wait({launcher})
        finally:
            self._serving.discard(served)
            self._unproven.add(served)
            with anyio.CancelScope(shield=True):
                await stop_worker(
                    served, deadline_s=s.stop_deadline_s, cancel_deadline_s=s.cancel_deadline_s
                )
            self._unproven.discard(served)
        raise BrokerUnavailable(f"SAQ worker of queue {queue!r} exited on its own")

    async def reap(self, within_s: float = 5.0) -> None:
        """Re-check workers whose stop failed; forget those whose tasks have all ended.

        Waits up to `within_s` for the survivors, then raises
        `WorkerStopFailed` for the first worker that still has a live task.
        """
        with anyio.move_on_after(within_s):
            while any(s.survivors() for s in self._unproven):
                await anyio.sleep(0.05)
        for served in sorted(self._unproven, key=lambda s: s.queue):
            alive = served.survivors()
            if alive:
                raise WorkerStopFailed(served.queue, [t.get_name() for t in alive], within_s)
            self._unproven.discard(served)

    # -- primitives beyond the seam -----------------------------------------------

    async def sweep(self, queue: str, abort_wait_s: float = 5.0) -> list[str]:
        """SAQ's sweep of `queue` now: untouched active jobs past their heartbeat end aborted.

        A swept job is first marked aborting (a local worker running it
        cancels its hop) and, after at most `abort_wait_s`, finished as
        aborted with error "swept" (retries=0). Returns the swept keys.
        """
        q = self.queue(queue)
        with _unavailable("sweep", queue):
            return await q.sweep(abort=abort_wait_s)

    async def dequeue(
        self, queue: str, timeout_s: float = 0.1, boot_id: str | None = None
    ) -> JobInfo | None:
        """Take the next job of `queue` without running it (it stays active, untouched),
        stamped with `boot_id` when given.

        For tests and diagnostics: it is what a worker that died right after
        dequeueing leaves behind.
        """
        q = self.queue(queue)
        serving, q.dequeuing_boot = q.dequeuing_boot, boot_id
        try:
            with _unavailable("dequeue", queue):
                job = await q.dequeue(timeout=timeout_s, poll_interval=min(0.05, timeout_s))
        finally:
            q.dequeuing_boot = serving
        if job is None:
            return None
        q._unstarted.discard(job.key)  # no worker will start it
        return await self.probe(job.key)

    async def abort_and_observe(
        self, key: str, reason: str, *, within_s: float = 10.0, every_s: float = 0.2
    ) -> AbortObservation:
        return await observe_abort(self, key, reason, within_s=within_s, every_s=every_s)

    # -- helpers -------------------------------------------------------------------

    @staticmethod
    async def _select(
        conn: psycopg.AsyncConnection[Any], q: VesselQueue, key: str, *, lock: bool
    ) -> tuple[bytes, str, str] | None:
        cursor = await conn.execute(
            SQL(_SELECT_JOB).format(
                jobs_table=q.jobs_table, lock=SQL("FOR UPDATE" if lock else "")
            ),
            {"key": key},
        )
        row = await cursor.fetchone()
        if row is None:
            return None
        return bytes(row[0]), str(row[1]), str(row[2])

    def _owner(self, row: tuple[bytes, str, str]) -> VesselQueue:
        queue = self._queues.get(row[2])
        if queue is None:
            raise BrokerUnavailable(f"job belongs to queue {row[2]!r}, which is not connected")
        return queue


@dataclass(frozen=True)
class AbortObservation:
    """What an abort request and the polling after it observed."""

    requested: JobInfo | None
    """The job right after the abort request (None: no such key)."""
    final: JobInfo | None
    """The last probe."""
    acknowledged: bool
    """True when the job is absent or finished: no hop of it is still running."""


async def observe_abort(
    broker: Broker,
    key: str,
    reason: str,
    *,
    within_s: float = 10.0,
    every_s: float = 0.2,
    attempts: int = 3,
) -> AbortObservation:
    """Request an abort and poll until the broker shows the job finished, within a bound.

    SAQ has no abort acknowledgement event: only the worker running the hop
    cancels it, on its abort timer (NOTES-dependencies.md), so the caller
    learns containment by polling the job's status. An abort request that
    fails is retried `attempts` times (seed 000, "Cancellation, mutation, and
    recovery": the exact broker abort is retried three times before failure
    surfaces). Returns with `acknowledged=False` when the bound expires.
    """
    requested: JobInfo | None = None
    for attempt in range(attempts):
        try:
            requested = await broker.abort(key, reason)
            break
        except BrokerUnavailable:
            if attempt == attempts - 1:
                raise
            await anyio.sleep(every_s)
    final = requested
    with anyio.move_on_after(within_s):
        while final is not None and not final.status.finished:
            await anyio.sleep(every_s)
            try:
                final = await broker.probe(key)
            except BrokerUnavailable as exc:
                log.warning("probe of %s after abort failed: %s", key, exc)
    acknowledged = final is None or final.status.finished
    return AbortObservation(requested=requested, final=final, acknowledged=acknowledged)


@contextmanager
def _unavailable(op: str, what: str) -> Iterator[None]:
    try:
        yield
    except (psycopg.Error, OSError) as exc:
        raise BrokerUnavailable(f"SAQ {op} of {what} failed: {exc}") from exc


def _job_info(key: str, row: tuple[bytes, str, str]) -> JobInfo:
    blob: dict[str, Any] = json.loads(row[0])
    kwargs: dict[str, Any] = blob.get("kwargs") or {}
    if "run_id" in kwargs and "seq" in kwargs:
        run_id, seq = UUID(str(kwargs["run_id"])), int(kwargs["seq"])
    else:
        run_id, seq = parse_hop_key(key)
    return JobInfo(
        key=key,
        queue=row[2],
        status=JobStatus(row[1]),
        priority=int(blob.get("priority", 0)),
        run_id=run_id,
        seq=seq,
        started_at=_seconds(blob.get("started")),
        touched_at=_seconds(blob.get("touched")),
        error=blob.get("error"),
        boot_id=(blob.get("meta") or {}).get(BOOT_META),
    )


async def _stored_schema_version(conn: psycopg.AsyncConnection[Any]) -> int | None:
    cursor = await conn.execute("SELECT to_regclass('saq_versions') IS NOT NULL")
    exists = await cursor.fetchone()
    if not exists or not exists[0]:
        return None
    cursor = await conn.execute("SELECT max(version) FROM saq_versions")
    row = await cursor.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _known_schema_version() -> int:
    migrations = get_migrations(jobs_table=Identifier(JOBS_TABLE), stats_table=Identifier("x"))
    return max(version for version, _ in migrations)


def _seconds(millis: object) -> float | None:
    if not isinstance(millis, (int, float)) or millis <= 0:
        return None
    return float(millis) / 1000.0


def _jsonable(value: object) -> object:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)

