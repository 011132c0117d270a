"""What the SAQ queue facade costs PostgreSQL per job, asserted row by row (issue 17).

`VesselQueue` sends SAQ's `enqueue` and `dequeue` notifications from the very
statement whose write they announce (`pg_notify`), and writes a dequeued job
without SAQ's savepoint, so each of those is one transaction id instead of two
(a NOTIFY, and a savepoint that writes, each take an id of their own). The
evidence is immune to other sessions on the cluster: no NOTIFY of its own is
sent, a listener gets each notification once, and the top-level transaction
that wrote a dequeued job must be the `xmin` of the row version it left.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any
from uuid import UUID, uuid4

import anyio
import psycopg
import pytest
from psycopg import sql
from saq.queue.postgres import DEQUEUE, ENQUEUE

from runtime.adapters.saq import SaqBroker, VesselQueue
from runtime.seams import JobStatus
from tests.bounds import HANG_S
from tests.contract.test_saq_adapter import STOPS, _broker, publish

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

XID_OF = "SELECT pg_current_xact_id_if_assigned()::text::bigint % 4294967296"
"""The sending transaction's id as a 32-bit xid (what `xmin` holds), None when it has none."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def saq(pg_fresh_dsn: str) -> AsyncIterator[tuple[SaqBroker, str]]:
    async with _broker(pg_fresh_dsn, STOPS) as broker:
        yield broker, pg_fresh_dsn


def record_notifies(queue: VesselQueue, sent: list[tuple[str, int | None]]) -> None:
    """Wrap `queue._notify` so each notification records the transaction it went under."""
    original = queue._notify

    async def notify(key: str, connection: Any = None) -> None:
        xid = None
        if connection is not None:
            cur = await connection.execute(XID_OF)
            row = await cur.fetchone()
            xid = None if row is None or row[0] is None else int(row[0])
        sent.append((key, xid))
        await original(key, connection=connection)

    queue._notify = notify  # type: ignore[method-assign]


async def xmin_of(dsn: str, key: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT xmin::text::bigint FROM saq_jobs WHERE key = %s",
                                 (key,))
        row = await cur.fetchone()
    assert row is not None, key
    return int(row[0])


async def test_a_publish_and_its_notification_are_one_statement(
    saq: tuple[SaqBroker, str],
) -> None:
    """The insert and its `enqueue` notification are one autocommit statement (the
    notification is `pg_notify` over the inserted row), so one transaction: no
    NOTIFY of its own, and none at all when the key exists already."""
    broker, dsn = saq
    queue = broker.queue("runs")
    sent: list[tuple[str, int | None]] = []
    record_notifies(queue, sent)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
        await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(queue._channel)))
        rid = uuid4()
        key = await publish(broker, run_id=rid)
        got = [(n.channel, n.payload)
               async for n in listener.notifies(timeout=HANG_S, stop_after=1)]
        assert got == [(queue._channel, ENQUEUE)]
        # the key exists: nothing inserted, nothing announced
        assert not await broker.publish("runs", key, run_id=rid, seq=0, priority=50,
                                        heartbeat=120)
        again = [n async for n in listener.notifies(timeout=0.3, stop_after=1)]
    assert again == []
    assert sent == []


def record_marks(queue: VesselQueue, marked: list[int | None]) -> None:
    """Wrap `queue._mark_active` so each dequeued job's write records its top-level
    transaction (a savepoint's write would carry a subtransaction's id as `xmin`)."""
    original = queue._mark_active

    async def mark(cursor: Any, job: Any) -> None:
        await original(cursor, job)
        await cursor.execute(XID_OF)
        row = await cursor.fetchone()
        marked.append(None if row is None or row[0] is None else int(row[0]))

    queue._mark_active = mark  # type: ignore[method-assign]


async def test_a_dequeue_its_job_update_and_notification_are_one_transaction(
    saq: tuple[SaqBroker, str],
) -> None:
    broker, dsn = saq
    queue = broker.queue("runs")
    key = await publish(broker)
    sent: list[tuple[str, int | None]] = []
    marked: list[int | None] = []
    record_notifies(queue, sent)
    record_marks(queue, marked)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
        await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(queue._channel)))
        info = await broker.dequeue("runs", boot_id="boot-a")
        assert info is not None and info.key == key and info.boot_id == "boot-a"
        got = [(n.channel, n.payload)
               async for n in listener.notifies(timeout=0.5, stop_after=2)]
    # the job's final row version (status and job blob) was written by the
    # dequeue's own transaction, not a savepoint of it; the dequeue statement sent
    # the one notification itself, no NOTIFY of its own
    assert marked == [await xmin_of(dsn, key)]
    assert got == [(queue._channel, DEQUEUE)]
    assert sent == []


async def test_a_worker_starting_a_job_it_just_dequeued_does_not_rewrite_it(
    saq: tuple[SaqBroker, str],
) -> None:
    """SAQ's worker rewrites each job it starts; the dequeue already wrote it ACTIVE,
    so while the hop runs the row is still the version the dequeue wrote."""
    broker, dsn = saq
    marked: list[int | None] = []
    record_marks(broker.queue("runs"), marked)
    running, release = anyio.Event(), anyio.Event()

    async def hop(run_id: UUID, seq: int) -> None:
        running.set()
        await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(broker.serve, "runs", hop, 1, boot_id="boot-b"))
        key = await publish(broker)
        with anyio.fail_after(HANG_S):
            await running.wait()
        assert marked == [await xmin_of(dsn, key)]
        info = await broker.probe(key)
        assert info is not None and info.status is JobStatus.ACTIVE
        assert info.boot_id == "boot-b" and info.started_at is not None
        release.set()
        with anyio.fail_after(HANG_S):
            while (done := await broker.probe(key)) is None or done.status is not \
                    JobStatus.COMPLETE:
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    # the job's finish wrote the worker's fields it had kept in memory
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT job FROM saq_jobs WHERE key = %s", (key,))
        row = await cur.fetchone()
    assert row is not None
    blob = json.loads(row[0])
    assert blob["attempts"] == 1 and blob["worker_id"]
