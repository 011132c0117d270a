"""The PostgreSQL queue facade the Vessel installs in front of SAQ.

`VesselQueue` is a `saq.queue.postgres.PostgresQueue` with two changes, both
required by seed 000_81a5c720b14d934a.txt:

- "Cancellation, mutation, and recovery" (shutdown paragraph): the facade is
  in place before `connect()`, and when SAQ has opened the pool it manages
  but schema initialisation fails before the queue marks itself connected,
  the facade closes that pool itself. SAQ's own `disconnect()` is a no-op
  until the connected flag is set, so without this the partial owner leaks.
- "Admission and exact claim" (hop keys are never reused): SAQ's insert
  revives a finished key when the new `scheduled` second is later than the
  stored one. The facade's insert never replaces an existing row, whatever
  its status, so a key names one job for as long as its row exists.

- One write transaction where SAQ spends two (issue 17, M14): SAQ's
  pool is autocommit, so its insert and the `enqueue` NOTIFY after it, and
  its dequeue transaction and the `dequeue` NOTIFY after it, each commit
  separately, and a NOTIFY takes a transaction id of its own. The facade
  sends each NOTIFY inside the transaction of the write it announces: the
  same rows and the same notifications, which PostgreSQL delivers at that
  commit, when the announced row is visible (as before), in one transaction
  id instead of two. The dequeue also writes each dequeued job in its own
  transaction, not in a savepoint of it as SAQ does (a savepoint that
  writes takes a subtransaction id per job). And the worker's own write
  of a job it starts (SAQ's `process` sets `attempts`, `worker_id` and a
  fresh `started`/`touched`, status ACTIVE) is skipped for a job this
  queue's dequeue has just written ACTIVE: the row already says ACTIVE with
  its start, heartbeat base and boot, which is all a probe, the sweep and
  recovery read; the worker's in-memory fields reach the row with the job's
  next write (its finish, an abort, a heartbeat refresh reads the row).
  Round trips too (client CPU): the insert and its notification are one
  statement (`pg_notify` over the inserted row), the dequeue statement sends
  its own notification, and a job update whose status is given (a finish) is
  one autocommit UPDATE rather than BEGIN, UPDATE, COMMIT.

- Several Vessels on one database (issue 15, M11): a queue served by a boot
  stamps each job it makes active with that boot's id (`job.meta["boot"]`),
  in the very write that dequeues it, so recovery can tell a live peer's
  freshly dequeued job from a dead boot's stranded one.

Everything else (dequeue order and statement, abort, sweep, job updates) is SAQ's own code
on SAQ's own tables. This module is asyncio-only, like SAQ and psycopg.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from functools import cached_property
from textwrap import dedent
from typing import Any

import anyio
from psycopg.pq import TransactionStatus
from psycopg.sql import SQL
from saq.job import Job, Status
from saq.queue.postgres import DEQUEUE, ENQUEUE, PostgresQueue
from saq.utils import now, now_seconds

log = logging.getLogger(__name__)

POOL_CLOSE_TIMEOUT_S = 5.0

_INSERT_ONCE = dedent(
    """
    INSERT INTO {jobs_table} (key, job, queue, status, priority, group_key, scheduled)
    VALUES (%(key)s, %(job)s, %(queue)s, %(status)s, %(priority)s, %(group_key)s, %(scheduled)s)
    ON CONFLICT (key) DO NOTHING
    RETURNING 1
    """
)

_INSERT_ONCE_AND_NOTIFY = (
    "WITH inserted AS (\n" + _INSERT_ONCE.strip()
    + "\n)\nSELECT pg_notify(%(channel)s, %(payload)s) FROM inserted\n"
)
"""`_INSERT_ONCE` and, only when it inserted, SAQ's `enqueue` notification: one
autocommit statement, so one transaction and one round trip (issue 17, client CPU)."""

_UPDATE = dedent(
    """
    UPDATE {jobs_table} SET job = %(job)s, status = %(status)s, scheduled = %(scheduled)s
      {expire_at}
    WHERE key = %(key)s
    """
)
"""SAQ 0.26.4's job update, unchanged."""

_DEQUEUE = dedent(
    """
    WITH locked_job AS (
      SELECT key
      FROM {jobs_table}
      WHERE status = 'queued'
        AND queue = %(queue)s
        AND %(now)s >= scheduled
        AND priority BETWEEN %(plow)s AND %(phigh)s
        AND group_key NOT IN (
          SELECT DISTINCT group_key
          FROM {jobs_table}
          WHERE status = 'active'
            AND queue = %(queue)s
            AND group_key IS NOT NULL
        )
      ORDER BY priority, scheduled
      LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED
    )
    UPDATE {jobs_table} SET status = 'active'
    FROM locked_job
    WHERE {jobs_table}.key = locked_job.key
    RETURNING job
    """
)
"""SAQ 0.26.4's dequeue statement, unchanged."""

_DEQUEUE_AND_NOTIFY = (
    _DEQUEUE.replace("\n)\nUPDATE ", "\n), dequeued AS (\nUPDATE ", 1)
    + ")\nSELECT job, pg_notify(%(channel)s, %(payload)s) FROM dequeued\n"
)
"""`_DEQUEUE`, and SAQ's `dequeue` notification when it took a job: PostgreSQL sends
one notification for the same channel and payload repeated in a transaction, at its
commit (as before). One round trip instead of SAQ's NOTIFY after the statement."""

_MARK_ACTIVE = dedent(
    """
    UPDATE {jobs_table} SET job = %(job)s, status = %(status)s, scheduled = %(scheduled)s
    WHERE key = %(key)s
    """
)
"""SAQ 0.26.4's job update (`_update` without `expire_at`), as the dequeue sends it."""


BOOT_META = "boot"
"""The job meta key holding the boot whose worker dequeued it."""


class VesselQueue(PostgresQueue):
    """A SAQ PostgreSQL queue that never leaks a half-opened pool or reuses a key."""

    dequeuing_boot: str | None = None
    """The boot whose worker dequeues from this queue (set by `SaqBroker.serve`)."""

    @cached_property
    def _unstarted(self) -> set[str]:
        """Keys this queue's dequeue wrote ACTIVE whose worker has not started them yet."""
        return set()

    async def update(self, job: Job, **kwargs: Any) -> None:
        """SAQ's update, except a worker's start of a job just dequeued here (SAQ's
        `process` calls exactly `update(job, status=ACTIVE)`), whose row the dequeue
        already wrote ACTIVE: that start changes the job in memory only."""
        unstarted = job.key in self._unstarted
        self._unstarted.discard(job.key)
        if unstarted and kwargs == {"status": Status.ACTIVE}:
            job.touched = now()
            job.status = Status.ACTIVE
            return
        await super().update(job, **kwargs)

    async def _update(self, job: Job, status: Status | None = None, **kwargs: Any) -> None:
        """SAQ's update; a job written ACTIVE by this queue's boot carries its stamp.
        SAQ's dequeue makes a job active through here, inside the dequeue's own
        transaction, so no dequeued job is ever active without its boot."""
        if self.dequeuing_boot is not None and status is Status.ACTIVE:
            job.meta.setdefault(BOOT_META, self.dequeuing_boot)
        connection = kwargs.get("connection")
        if status is None or (
            connection is not None
            and connection.info.transaction_status is not TransactionStatus.IDLE
        ):
            # SAQ reads the status under a row lock first, or nests a savepoint in
            # the caller's transaction: its own code.
            await super()._update(job, status, **kwargs)
            return
        # One UPDATE with its status given, on an autocommit connection: SAQ wraps it
        # in BEGIN/COMMIT, a transaction of one statement either way; without them it
        # is one round trip instead of three (issue 17, client CPU). A job's finish
        # comes here.
        expire_at = kwargs.get("expire_at", -1)
        job.status = status
        async with (
            nullcontext(connection) if connection is not None else self.pool.connection()
        ) as conn:
            await conn.execute(
                SQL(_UPDATE).format(
                    jobs_table=self.jobs_table,
                    expire_at=SQL(",expire_at = %(expire_at)s" if expire_at != -1 else ""),
                ),
                {"job": self.serialize(job), "status": job.status, "key": job.key,
                 "scheduled": job.scheduled, "expire_at": expire_at},
            )

    @property
    def connected(self) -> bool:
        return self._connected

    async def connect(self) -> None:
        """Open the managed pool, initialise SAQ's schema, mark the queue connected.

        On any failure before the connected flag is set (including
        cancellation), a pool this queue manages is closed before the error
        propagates, so the caller never has to disconnect a queue that never
        connected.
        """
        if self._connected:
            return
        try:
            await super().connect()
        except BaseException:
            if self._manage_pool_lifecycle and not self._connected:
                await self._close_partial_pool()
            raise

    async def _close_partial_pool(self) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.pool.close(timeout=POOL_CLOSE_TIMEOUT_S)
            except Exception as exc:  # the original error is the one worth raising
                log.warning("closing the pool of queue %s after a failed connect: %r",
                            self.name, exc)

    async def _dequeue(self) -> None:
        """SAQ 0.26.4's `_dequeue` (same statement, same job updates, same local
        hand-off), except that its `dequeue` notification is sent by the dequeue
        statement itself (`_DEQUEUE_AND_NOTIFY`), inside the dequeue transaction,
        rather than as an autocommit statement after it, and that each
        dequeued job's update runs in that transaction itself: SAQ's `_update` opens
        a nested `transaction()` there, a savepoint, and a savepoint that writes
        takes a (sub)transaction id of its own, one per dequeued job."""
        if self._dequeue_lock.locked():
            return
        async with self._dequeue_lock, self.pool.connection() as conn, conn.transaction(), \
                    conn.cursor() as cursor:
            if not self._waiting:
                return
            await cursor.execute(
                SQL(_DEQUEUE_AND_NOTIFY).format(jobs_table=self.jobs_table),
                {"queue": self.name, "now": now_seconds(), "limit": self._waiting,
                 "plow": self._priorities[0], "phigh": self._priorities[1],
                 "channel": self._channel, "payload": DEQUEUE},
            )
            rows = await cursor.fetchall()
            dequeued = now()
            for row in rows:
                job = self.deserialize(row[0], Status.ACTIVE)
                assert job
                job.started = dequeued
                job.touched = dequeued
                await self._mark_active(cursor, job)
                self._job_queue.put_nowait(job)

    async def _mark_active(self, cursor: Any, job: Job) -> None:
        """Write `job` ACTIVE (stamped with the dequeuing boot) in the cursor's transaction."""
        if self.dequeuing_boot is not None:
            job.meta.setdefault(BOOT_META, self.dequeuing_boot)
        job.status = Status.ACTIVE
        self._unstarted.add(job.key)
        await cursor.execute(
            SQL(_MARK_ACTIVE).format(jobs_table=self.jobs_table),
            {"job": self.serialize(job), "status": job.status, "key": job.key,
             "scheduled": job.scheduled},
        )

    async def _enqueue(self, job: Job) -> Job | None:
        """Insert `job` unless its key exists in any status; notify workers when inserted
        (the insert and its NOTIFY commit as one transaction)."""
        async with self.pool.connection() as conn, conn.cursor() as cursor:
            await cursor.execute(
                SQL(_INSERT_ONCE_AND_NOTIFY).format(jobs_table=self.jobs_table),
                {
                    "key": job.key,
                    "job": self.serialize(job),
                    "queue": self.name,
                    "status": job.status,
                    "priority": job.priority,
                    "group_key": job.group_key,
                    "scheduled": job.scheduled or int(now_seconds()),
                    "channel": self._channel,
                    "payload": ENQUEUE,
                },
            )
            if await cursor.fetchone() is None:
                return None
        return job
