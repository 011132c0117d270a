"""Light unit tests of MemoryBroker semantics (the full contract lives in tests/contract)."""

from __future__ import annotations

from uuid import UUID

import anyio
import pytest

from runtime.adapters.memory import MemoryBroker
from runtime.adapters.memory import broker as broker_module
from runtime.seams import JobStatus
from tests.bounds import HANG_S
from tests.unit.fakes import FakeClock

pytestmark = pytest.mark.anyio

RID = UUID(int=1)


async def put(b: MemoryBroker, key: str, priority: int = 50, queue: str = "runs",
              heartbeat: int = 120) -> bool:
    return await b.publish(queue, key, run_id=RID, seq=0, priority=priority, heartbeat=heartbeat)


async def test_a_key_is_deduplicated_while_live_and_never_reused_after() -> None:
    b = MemoryBroker(FakeClock())
    assert await put(b, "run:x:0") is True
    assert await put(b, "run:x:0", priority=1) is False
    assert len(b.jobs) == 1 and b.jobs["run:x:0"].info.priority == 50

    job = await b.dequeue("runs")
    assert job is not None and job.status is JobStatus.ACTIVE
    assert await put(b, "run:x:0") is False  # active
    await b.finish("run:x:0", JobStatus.COMPLETE)
    assert await put(b, "run:x:0") is False  # finished keys stay spent
    assert b.statuses() == {"run:x:0": JobStatus.COMPLETE}


async def test_lower_priority_value_dequeues_first_ties_in_publish_order() -> None:
    b = MemoryBroker(FakeClock())
    for key, prio in (("a", 50), ("b", 10), ("c", 90), ("d", 10)):
        await put(b, key, priority=prio)
    await put(b, "other-lane", priority=0, queue="rites")

    order = []
    while (job := await b.dequeue("runs")) is not None:
        order.append(job.key)
    assert order == ["b", "d", "a", "c"]
    assert b.jobs["other-lane"].info.status is JobStatus.QUEUED


async def test_abort_of_a_queued_job_is_immediate_and_of_an_active_job_is_aborting() -> None:
    b = MemoryBroker(FakeClock())
    await put(b, "q")
    await put(b, "act", priority=0)
    assert (await b.dequeue("runs")).key == "act"  # type: ignore[union-attr]

    queued = await b.abort("q", "cancelled")
    active = await b.abort("act", "cancelled")
    assert queued is not None and queued.status is JobStatus.ABORTED
    assert active is not None and active.status is JobStatus.ABORTING
    assert await b.abort("missing", "x") is None
    assert await b.dequeue("runs") is None


async def test_served_hop_is_cancelled_once_its_job_is_aborting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(broker_module, "ABORT_POLL_S", 0.01)
    b = MemoryBroker(FakeClock())
    started = anyio.Event()
    finished_normally = False

    async def handler(run_id: UUID, seq: int) -> None:
        nonlocal finished_normally
        started.set()
        await anyio.sleep_forever()
        finished_normally = True

    await put(b, "k")
    with anyio.fail_after(HANG_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(b.serve, "runs", handler, 1)
            await started.wait()
            await b.abort("k", "stop")
            while b.jobs["k"].info.status is not JobStatus.ABORTED:
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert not finished_normally
    assert b.jobs["k"].info.status is JobStatus.ABORTED


async def test_sweep_aborts_active_jobs_untouched_beyond_their_heartbeat() -> None:
    clock = FakeClock()
    b = MemoryBroker(clock)
    await put(b, "stale", heartbeat=120, priority=1)
    await put(b, "fresh", heartbeat=120, priority=2)
    await put(b, "waiting", heartbeat=120, priority=3)
    await b.dequeue("runs")
    await b.dequeue("runs")

    clock.advance(100)
    await b.touch("fresh")
    await b.touch("waiting")  # a queued job is not touched
    clock.advance(21)  # stale: 121 s untouched; fresh: 21 s

    assert await b.sweep("runs") == ["stale"]
    assert b.jobs["stale"].info.status is JobStatus.ABORTED
    assert b.jobs["stale"].info.error == broker_module.SWEPT
    assert b.jobs["fresh"].info.status is JobStatus.ACTIVE
    assert b.jobs["waiting"].info.status is JobStatus.QUEUED
    assert b.jobs["waiting"].info.touched_at is None
    assert await b.sweep("rites") == []


async def test_served_job_completes_or_fails_with_the_handler() -> None:
    b = MemoryBroker(FakeClock())

    async def handler(run_id: UUID, seq: int) -> None:
        if seq == 1:
            raise RuntimeError("hop broke")

    await b.publish("runs", "ok", run_id=RID, seq=0, priority=1, heartbeat=120)
    await b.publish("runs", "bad", run_id=RID, seq=1, priority=2, heartbeat=120)
    with anyio.fail_after(HANG_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(b.serve, "runs", handler, 2)
            while any(not j.info.status.finished for j in b.jobs.values()):
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert b.statuses() == {"bad": JobStatus.FAILED, "ok": JobStatus.COMPLETE}
    assert "hop broke" in (b.jobs["bad"].info.error or "")
