"""The Broker contract: MemoryBroker and SaqBroker (SAQ on PostgreSQL) behave alike.

The behaviours are those of seed 000_81a5c720b14d934a.txt ("Admission and
exact claim": exact hop keys never reused, `100 - priority` with lower values
first, retries=0, a heartbeat that makes abandoned active jobs sweepable;
"Cancellation, mutation, and recovery": abort of queued and running hops)
and of SAQ's own queue and worker tests. Each test runs on both
implementations; SAQ only on asyncio.
"""

from __future__ import annotations

import signal
from uuid import UUID

import anyio
import pytest

from runtime.seams import JobStatus
from tests.bounds import HANG_S, SETTLE_S
from tests.contract.broker_impls import (
    BrokerImpl,
    broker_fixture,  # noqa: F401  (the `broker` fixture)
    new_key,
    put,
)

pytestmark = pytest.mark.anyio

FINISHED = {JobStatus.ABORTED, JobStatus.COMPLETE, JobStatus.FAILED}


async def test_publish_creates_a_queued_job_that_probe_reports(broker: BrokerImpl) -> None:
    key, run_id = new_key()
    assert await put(broker, key, priority=37, run_id=run_id, seq=0) is True
    info = await broker.seam.probe(key)
    assert info is not None
    assert (info.key, info.queue, info.status, info.priority) == (key, "runs", JobStatus.QUEUED, 37)
    assert (info.run_id, info.seq) == (run_id, 0)
    assert info.started_at is None and info.error is None
    assert await broker.seam.probe(new_key()[0]) is None


async def test_a_key_is_deduplicated_while_queued_active_or_aborting(
    broker: BrokerImpl,
) -> None:
    key, _ = new_key()
    assert await put(broker, key, priority=50) is True
    assert await put(broker, key, priority=1) is False  # queued
    taken = await broker.dequeue("runs")
    assert taken is not None and taken.key == key and taken.status is JobStatus.ACTIVE
    assert await put(broker, key, priority=1) is False  # active
    aborting = await broker.seam.abort(key, "stop")
    assert aborting is not None and aborting.status is JobStatus.ABORTING
    assert await put(broker, key, priority=1) is False  # aborting
    info = await broker.seam.probe(key)
    assert info is not None and info.priority == 50  # the stored job was never replaced


async def test_a_finished_key_is_never_reused_even_a_second_later(
    broker: BrokerImpl,
) -> None:
    key, _ = new_key()
    await put(broker, key)
    aborted = await broker.seam.abort(key, "gone")
    assert aborted is not None and aborted.status is JobStatus.ABORTED
    await broker.elapse(1.1)  # raw SAQ would revive the key once `scheduled` moves on
    assert await put(broker, key, priority=3) is False
    info = await broker.seam.probe(key)
    assert info is not None and info.status is JobStatus.ABORTED and info.priority == 50
    assert await broker.dequeue("runs") is None


async def test_lower_priority_values_are_dequeued_first_per_queue(
    broker: BrokerImpl,
) -> None:
    keys = {prio: new_key()[0] for prio in (50, 10, 90, 0)}
    for prio in (50, 10, 90):
        await put(broker, keys[prio], priority=prio)
    await put(broker, keys[0], priority=0, queue="rites")
    order = []
    while (job := await broker.dequeue("runs")) is not None:
        order.append(job.priority)
    assert order == [10, 50, 90]
    rites = await broker.seam.probe(keys[0])
    assert rites is not None and rites.status is JobStatus.QUEUED
    taken = await broker.dequeue("rites")
    assert taken is not None and taken.key == keys[0]


async def test_abort_of_a_queued_job_is_immediate(broker: BrokerImpl) -> None:
    key, _ = new_key()
    await put(broker, key)
    info = await broker.seam.abort(key, "cancelled by caller")
    assert info is not None and info.status is JobStatus.ABORTED
    assert info.error == "cancelled by caller"
    assert await broker.dequeue("runs") is None
    assert await broker.seam.abort(new_key()[0], "nothing") is None


async def test_abort_leaves_a_finished_job_as_it_is(broker: BrokerImpl) -> None:
    key, _ = new_key()
    await put(broker, key)
    await broker.seam.abort(key, "first")
    again = await broker.seam.abort(key, "second")
    assert again is not None and again.status is JobStatus.ABORTED and again.error == "first"


async def test_abort_never_revives_a_completed_job(broker: BrokerImpl) -> None:
    key, run_id = new_key()

    async def handler(rid: UUID, seq: int) -> str:
        return "settled"

    async with anyio.create_task_group() as tg:
        tg.start_soon(broker.seam.serve, "runs", handler, 1)
        await put(broker, key, run_id=run_id)
        done = await broker.wait_status(key, FINISHED)
        tg.cancel_scope.cancel()
    assert done.status is JobStatus.COMPLETE
    after = await broker.seam.abort(key, "late fence")
    assert after is not None and after.status is JobStatus.COMPLETE and after.error is None
    assert await put(broker, key) is False


async def test_abort_of_a_running_hop_cancels_it_and_the_job_ends_aborted(
    broker: BrokerImpl,
) -> None:
    key, run_id = new_key()
    started = anyio.Event()
    outcome: list[str] = []

    async def handler(rid: UUID, seq: int) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            outcome.append("cancelled")
            raise

    async with anyio.create_task_group() as tg:
        tg.start_soon(broker.seam.serve, "runs", handler, 1)
        await put(broker, key, run_id=run_id)
        with anyio.fail_after(HANG_S):
            await started.wait()
        requested = await broker.seam.abort(key, "operator abort")
        assert requested is not None and requested.status is JobStatus.ABORTING
        final = await broker.wait_status(key, FINISHED)
        tg.cancel_scope.cancel()
    assert final.status is JobStatus.ABORTED
    assert final.error == "operator abort"
    assert outcome == ["cancelled"]


async def test_touch_refreshes_an_active_job_only(broker: BrokerImpl) -> None:
    key, _ = new_key()
    queued_key, _ = new_key()
    await put(broker, key, priority=0, heartbeat=1)
    await put(broker, queued_key, priority=99, heartbeat=1)
    taken = await broker.dequeue("runs")
    assert taken is not None and taken.touched_at is not None
    await broker.elapse(0.7)
    await broker.seam.touch(key)
    await broker.seam.touch(queued_key)
    touched = await broker.seam.probe(key)
    queued = await broker.seam.probe(queued_key)
    assert touched is not None and touched.touched_at is not None
    assert touched.touched_at >= taken.touched_at + 0.5
    assert queued is not None and queued.status is JobStatus.QUEUED
    await broker.elapse(0.7)  # 1.4 s since dequeue, 0.7 s since the touch
    assert await broker.sweep("runs") == []
    info = await broker.seam.probe(key)
    assert info is not None and info.status is JobStatus.ACTIVE


async def test_sweep_aborts_an_untouched_active_job_with_error_swept(
    broker: BrokerImpl,
) -> None:
    stale, _ = new_key()
    forever, _ = new_key()
    await put(broker, stale, priority=0, heartbeat=1)
    await put(broker, forever, priority=1, heartbeat=0)  # heartbeat 0: never swept
    assert await broker.dequeue("runs") is not None
    assert await broker.dequeue("runs") is not None
    assert await broker.sweep("runs") == []
    await broker.elapse(1.5)
    assert await broker.sweep("runs") == [stale]
    info = await broker.seam.probe(stale)
    assert info is not None and info.status is JobStatus.ABORTED and info.error == "swept"
    kept = await broker.seam.probe(forever)
    assert kept is not None and kept.status is JobStatus.ACTIVE


async def test_an_aborting_job_nobody_runs_is_swept_after_its_heartbeat(
    broker: BrokerImpl,
) -> None:
    key, _ = new_key()
    await put(broker, key, heartbeat=1)
    assert await broker.dequeue("runs") is not None
    await broker.elapse(1.5)
    aborting = await broker.seam.abort(key, "fence")
    assert aborting is not None and aborting.status is JobStatus.ABORTING
    assert await broker.sweep("runs") == []  # the abort refreshed the heartbeat
    await broker.elapse(1.5)
    assert await broker.sweep("runs") == [key]
    info = await broker.seam.probe(key)
    assert info is not None and info.status is JobStatus.ABORTED and info.error == "swept"


async def test_a_handler_exception_fails_the_job_and_success_completes_it(
    broker: BrokerImpl,
) -> None:
    bad, bad_run = new_key()
    good, good_run = new_key()

    async def handler(rid: UUID, seq: int) -> str:
        if rid == bad_run:
            raise ValueError("boom in the hop")
        return "settled"

    async with anyio.create_task_group() as tg:
        tg.start_soon(broker.seam.serve, "runs", handler, 2)
        await put(broker, bad, run_id=bad_run)
        await put(broker, good, run_id=good_run)
        failed = await broker.wait_status(bad, FINISHED)
        done = await broker.wait_status(good, FINISHED)
        tg.cancel_scope.cancel()
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None and "boom in the hop" in failed.error
    assert done.status is JobStatus.COMPLETE


async def test_serve_runs_at_most_concurrency_hops_at_once(broker: BrokerImpl) -> None:
    """Each hop waits until a second one runs beside it (or, if the worker never
    starts a second, until the deadline): the peak is reached by events, not by
    hoping two short sleeps overlap on a loaded machine."""
    keys = [new_key() for _ in range(5)]
    running = 0
    peak = 0
    pair = anyio.Event()

    async def handler(rid: UUID, seq: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 2:
            pair.set()
        with anyio.move_on_after(HANG_S):
            await pair.wait()
        await anyio.sleep(0.1)  # both still run: a third would start now if it could
        running -= 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(broker.seam.serve, "runs", handler, 2)
        for key, run_id in keys:
            await put(broker, key, run_id=run_id)
        for key, _ in keys:
            info = await broker.wait_status(key, FINISHED, within=SETTLE_S)
            assert info.status is JobStatus.COMPLETE
        tg.cancel_scope.cancel()
    assert peak == 2


async def test_serve_leaves_the_process_signal_handlers_alone(broker: BrokerImpl) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    key, run_id = new_key()
    seen = anyio.Event()

    async def handler(rid: UUID, seq: int) -> None:
        seen.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(broker.seam.serve, "runs", handler, 1)
        await put(broker, key, run_id=run_id)
        with anyio.fail_after(HANG_S):
            await seen.wait()
        during = {sig: signal.getsignal(sig) for sig in before}
        tg.cancel_scope.cancel()
    assert during == before
    assert {sig: signal.getsignal(sig) for sig in before} == before


# -- several Vessels on one database (issue 15, M11) ----------------------------------------


async def test_a_dequeue_stamps_the_job_with_the_workers_boot(broker: BrokerImpl) -> None:
    stamped, plain = new_key()[0], new_key()[0]
    assert await put(broker, stamped, priority=1) and await put(broker, plain, priority=2)
    assert (await broker.seam.probe(stamped)).boot_id is None  # type: ignore[union-attr]
    taken = await broker.dequeue("runs", boot_id="boot-a")
    assert taken is not None and (taken.key, taken.boot_id) == (stamped, "boot-a")
    untouched = await broker.dequeue("runs")
    assert untouched is not None and (untouched.key, untouched.boot_id) == (plain, None)
    await broker.seam.touch(stamped)
    aborting = await broker.seam.abort(stamped, "stop")
    assert aborting is not None and (aborting.status, aborting.boot_id) == (
        JobStatus.ABORTING, "boot-a")  # the stamp stays with the job


async def test_retire_ends_a_dead_workers_job_as_aborted_at_once(broker: BrokerImpl) -> None:
    queued, active, aborting, done = (new_key()[0] for _ in range(4))
    for i, key in enumerate((active, aborting, done, queued)):
        assert await put(broker, key, priority=i + 1)
    for _ in range(3):
        assert await broker.dequeue("runs", boot_id="boot-dead") is not None
    await broker.seam.abort(aborting, "stop")
    finished = await broker.seam.retire(done, "first")
    assert finished is not None and finished.status is JobStatus.ABORTED
    for key in (active, aborting, queued):
        info = await broker.seam.retire(key, "retired: its boot died")
        assert info is not None and info.status is JobStatus.ABORTED, (key, info)
        assert info.error == "retired: its boot died"
    again = await broker.seam.retire(done, "second")
    assert again is not None and (again.status, again.error) == (JobStatus.ABORTED, "first")
    assert await broker.seam.retire(new_key()[0], "none") is None
    assert await put(broker, active, priority=1) is False  # a retired key is never reused
