"""What only the SAQ adapter has to prove: connection, schema, facade and shutdown.

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"
(shutdown paragraph): the queue facade closes a pool SAQ opened when schema
initialisation fails; a worker stop is bounded and every observed worker
task is proven ended, or the failure is raised and the pools stay open.
Issue M5, "Bad input": a DSN that cannot connect fails clearly within a
bounded time; a schema newer than the code is refused with the versions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from uuid import UUID, uuid4

import anyio
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from runtime.adapters.saq import (
    SaqBroker,
    SaqSettings,
    VesselQueue,
    WorkerStopFailed,
    observe_abort,
)
from runtime.errors import BrokerUnavailable
from runtime.keys import hop_key
from runtime.seams import JobStatus
from tests.bounds import HANG_S, SETTLE_S

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


STOPS = SaqSettings(stop_deadline_s=HANG_S, cancel_deadline_s=0.5)
"""A stop that can prove itself ends as soon as it has (a loaded machine only makes it
later); the stop deadline bounds one that cannot, so it is generous here."""


@pytest.fixture
async def saq(pg_fresh_dsn: str) -> AsyncIterator[SaqBroker]:
    async with _broker(pg_fresh_dsn, STOPS) as broker:
        yield broker


@asynccontextmanager
async def _broker(dsn: str, settings: SaqSettings) -> AsyncIterator[SaqBroker]:
    broker = SaqBroker(dsn, settings=settings)
    await broker.connect()
    try:
        yield broker
    finally:
        await broker.reap(within_s=HANG_S)
        await broker.disconnect()


async def publish(broker: SaqBroker, run_id: UUID | None = None, heartbeat: int = 120) -> str:
    rid = run_id or uuid4()
    key = hop_key(rid, 0)
    assert await broker.publish("runs", key, run_id=rid, seq=0, priority=50, heartbeat=heartbeat)
    return key


async def test_a_dsn_that_cannot_connect_fails_fast_and_clearly() -> None:
    broker = SaqBroker("postgresql://postgres@127.0.0.1:1/nowhere",
                       settings=SaqSettings(connect_timeout_s=2.0))
    with pytest.raises(BrokerUnavailable, match="cannot reach PostgreSQL"), \
            anyio.fail_after(HANG_S):  # fails, rather than retrying forever
        await broker.connect()
    assert not broker.connected


async def test_a_missing_database_is_named(pg_dsn: str) -> None:
    dsn = pg_dsn.rsplit("/", 1)[0] + "/no_such_database_here"
    with pytest.raises(BrokerUnavailable, match="no_such_database_here"):
        await SaqBroker(dsn, settings=SaqSettings(connect_timeout_s=2.0)).connect()


async def test_a_saq_schema_newer_than_this_saq_is_refused(pg_fresh_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_fresh_dsn, autocommit=True) as conn:
        await conn.execute("CREATE TABLE saq_versions (version INT)")
        await conn.execute("INSERT INTO saq_versions VALUES (99)")
    broker = SaqBroker(pg_fresh_dsn)
    with pytest.raises(BrokerUnavailable, match=r"schema version 99 .* newer than the 3"):
        await broker.connect()
    assert not broker.connected


class _SchemaFails(VesselQueue):
    async def init_db(self) -> None:
        raise RuntimeError("schema initialisation failed on purpose")


async def test_the_facade_closes_the_pool_saq_opened_when_schema_init_fails(
    pg_fresh_dsn: str,
) -> None:
    pool: AsyncConnectionPool = AsyncConnectionPool(pg_fresh_dsn, open=False, min_size=1)
    queue = _SchemaFails(pool=pool, name="runs", min_size=1, max_size=2,
                         manage_pool_lifecycle=True)
    with pytest.raises(RuntimeError, match="on purpose"):
        await queue.connect()
    assert pool.closed
    assert not queue.connected
    await queue.disconnect()  # SAQ's no-op; nothing left to close


async def test_plain_saq_would_leak_that_pool(pg_fresh_dsn: str) -> None:
    """The reason for the facade (NOTES-dependencies.md): SAQ alone leaves it open."""
    from saq.queue.postgres import PostgresQueue

    class Plain(PostgresQueue):
        async def init_db(self) -> None:
            raise RuntimeError("schema initialisation failed on purpose")

    pool: AsyncConnectionPool = AsyncConnectionPool(pg_fresh_dsn, open=False, min_size=1)
    queue = Plain(pool=pool, name="runs", min_size=1, max_size=2, manage_pool_lifecycle=True)
    with pytest.raises(RuntimeError):
        await queue.connect()
    await queue.disconnect()
    assert not pool.closed
    await pool.close()


async def test_publish_after_disconnect_is_broker_unavailable(pg_fresh_dsn: str) -> None:
    broker = SaqBroker(pg_fresh_dsn)
    await broker.connect()
    await broker.disconnect()
    rid = uuid4()
    with pytest.raises(BrokerUnavailable):
        await broker.publish("runs", hop_key(rid, 0), run_id=rid, seq=0, priority=1,
                             heartbeat=120)
    with pytest.raises(BrokerUnavailable):
        await broker.probe(hop_key(rid, 0))


async def test_the_job_carries_the_seed_settings(saq: SaqBroker) -> None:
    rid = uuid4()
    key = await publish(saq, rid)
    job = await saq.queue("runs").job(key)
    assert job is not None
    assert (job.function, job.kwargs) == ("perform_run", {"run_id": str(rid), "seq": 0})
    assert (job.retries, job.timeout, job.heartbeat, job.ttl) == (0, 0, 120, 0)


async def test_a_graceful_stop_requeues_a_running_hop_as_saq_does(saq: SaqBroker) -> None:
    """SAQ's stop re-queues running jobs with error "cancelled" whatever their retries.

    (MemoryBroker models a crash instead: the job stays active until swept.
    The next boot's claim is fenced either way.)
    """
    started = anyio.Event()

    async def handler(rid: UUID, seq: int) -> None:
        started.set()
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(saq.serve, "runs", handler, 1)
        key = await publish(saq)
        with anyio.fail_after(HANG_S):
            await started.wait()
        tg.cancel_scope.cancel()
    info = await saq.probe(key)
    assert info is not None and info.status is JobStatus.QUEUED and info.error == "cancelled"


async def test_stop_recancels_a_hop_that_swallowed_its_cancellation(saq: SaqBroker) -> None:
    started = anyio.Event()
    swallowed = 0

    async def handler(rid: UUID, seq: int) -> None:
        nonlocal swallowed
        started.set()
        try:
            await anyio.sleep_forever()
        except BaseException:
            swallowed += 1  # lose the first cancellation, as SAQ's stop hang does
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(saq.serve, "runs", handler, 1)
        await publish(saq)
        with anyio.fail_after(HANG_S):
            await started.wait()
        tg.cancel_scope.cancel()
    # The stop proved the hop ended (no WorkerStopFailed): it cancelled it again after
    # the first cancellation was swallowed, since the hop ends in no other way.
    assert swallowed == 1


async def test_a_task_that_never_ends_fails_the_stop_and_keeps_the_pools(
    pg_fresh_dsn: str,
) -> None:
    async with _broker(pg_fresh_dsn, SaqSettings(stop_deadline_s=2.0,
                                                 cancel_deadline_s=0.5)) as saq:
        await _never_ending_hop_fails_the_stop(saq)


async def _never_ending_hop_fails_the_stop(saq: SaqBroker) -> None:
    """The hop ignores every cancellation, so the stop fails at its (short) deadline
    whatever the machine's speed."""
    started = anyio.Event()
    release = anyio.Event()

    async def handler(rid: UUID, seq: int) -> None:
        started.set()
        while not release.is_set():
            try:
                await anyio.sleep(0.05)
            except BaseException:
                continue  # ignores every cancellation until released

    with pytest.raises(BaseExceptionGroup) as caught:
        async with anyio.create_task_group() as tg:
            tg.start_soon(saq.serve, "runs", handler, 1)
            await publish(saq)
            with anyio.fail_after(HANG_S):
                await started.wait()
            tg.cancel_scope.cancel()
    failures = caught.value.exceptions
    assert len(failures) == 1 and isinstance(failures[0], WorkerStopFailed)
    assert "hop:run:" in str(failures[0])
    with pytest.raises(BrokerUnavailable, match="not proven stopped"):
        await saq.disconnect()
    assert saq.connected
    release.set()
    await saq.reap(within_s=HANG_S)  # now every task has ended: disconnect may proceed


async def test_observe_abort_sees_a_running_hop_end_aborted(saq: SaqBroker) -> None:
    started = anyio.Event()

    async def handler(rid: UUID, seq: int) -> None:
        started.set()
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(saq.serve, "runs", handler, 1)
        key = await publish(saq)
        with anyio.fail_after(HANG_S):
            await started.wait()
        seen = await observe_abort(saq, key, "cancel the run", within_s=SETTLE_S, every_s=0.1)
        tg.cancel_scope.cancel()
    assert seen.requested is not None and seen.requested.status is JobStatus.ABORTING
    assert seen.acknowledged
    assert seen.final is not None and seen.final.status is JobStatus.ABORTED


async def test_observe_abort_is_bounded_when_nobody_runs_the_job(saq: SaqBroker) -> None:
    key = await publish(saq)
    assert await saq.dequeue("runs") is not None  # active, but no worker will ever see it
    with anyio.fail_after(HANG_S):  # gives up after its 0.5 s, rather than waiting on
        seen = await saq.abort_and_observe(key, "fence", within_s=0.5, every_s=0.1)
    assert not seen.acknowledged
    assert seen.final is not None and seen.final.status is JobStatus.ABORTING


async def test_queue_teardown_defers_a_task_cancel_until_every_pool_was_closed(
    pg_fresh_dsn: str,
) -> None:
    """Seed 000, shutdown paragraph: a plain `Task.cancel()` landing while the
    first queue (`rites`, reverse order) closes its real SAQ pool waits until
    that pool has closed and `runs` was disconnected too, then is re-raised."""
    import asyncio

    broker = SaqBroker(pg_fresh_dsn)
    await broker.connect()
    queues = {name: broker.queue(name) for name in broker.queue_names}
    first = queues[broker.queue_names[-1]]
    entered, proceed = asyncio.Event(), asyncio.Event()
    real_disconnect = first.disconnect

    async def held_disconnect() -> None:
        entered.set()
        await proceed.wait()
        await real_disconnect()

    first.disconnect = held_disconnect  # type: ignore[method-assign]
    task = asyncio.get_running_loop().create_task(broker.disconnect())
    try:
        with anyio.fail_after(HANG_S):
            await entered.wait()
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()
        proceed.set()
        with pytest.raises(asyncio.CancelledError):
            with anyio.fail_after(20):
                await asyncio.shield(task)
    finally:
        proceed.set()
        for queue in queues.values():
            if not queue.pool.closed:
                await queue.pool.close()
    assert {name: q.pool.closed for name, q in queues.items()} == {"runs": True, "rites": True}


async def test_a_served_worker_stamps_its_boot_on_the_job_it_runs(saq: SaqBroker) -> None:
    """Issue 15, M11: the job a boot's SAQ worker dequeues names that boot, from
    the dequeue's own write on (recovery tells a live peer's job by it)."""
    started = anyio.Event()

    async def handler(rid: UUID, seq: int) -> None:
        started.set()
        await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(saq.serve, boot_id="boot-served"), "runs", handler, 1)
        key = await publish(saq)
        with anyio.fail_after(HANG_S):
            await started.wait()
        info = await saq.probe(key)
        tg.cancel_scope.cancel()
    assert info is not None and (info.status, info.boot_id) == (JobStatus.ACTIVE, "boot-served")
