"""The ordered Step writer (seed 000_81a5c720b14d934a.txt, "Events, settlement, and waits"):
non-token events become Step rows in publish order, the terminal barrier waits for the writer
chain, a failed append latches for every waiter of its generation without touching Run truth,
and repair retries the missing Step exactly once in a fresh generation."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime.errors import LedgerUnavailable
from runtime.events import (
    WRITER_QUEUE_LIMIT,
    Event,
    EventKind,
    RunChannel,
    StepWriteFailed,
    StepWriter,
    StepWriterClosed,
)
from runtime.models import Intent, RunStatus, Step
from tests.unit.fakes import EPOCH, FakeClock, LedgerProxy, make_world

pytestmark = pytest.mark.anyio

RUN = UUID(int=7)
SEQ = 3


class Boom(Exception):
    pass


class FakeLedger:
    """The two Step methods of the Ledger seam, with a stall gate and scripted failures.

    `fail[kind]` is a list of exceptions raised by successive appends of that kind;
    `commit_then_fail` kinds are appended before the exception (an ambiguous commit).
    `slowness(n)` is how many scheduler turns the n-th append takes.
    """

    def __init__(self) -> None:
        self.rows: list[Step] = []
        self.appends: list[str] = []
        self.fail: dict[str, list[BaseException]] = {}
        self.commit_then_fail: set[str] = set()
        self.stall: anyio.Event | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.slowness = lambda n: 0
        self.other_calls: list[str] = []

    async def append_step(
        self, run_id: UUID, seq: int, kind: str, data: dict[str, Any], now: datetime
    ) -> Step:
        self.appends.append(kind)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.stall is not None:
                await self.stall.wait()
            for _ in range(self.slowness(len(self.appends))):
                await anyio.lowlevel.checkpoint()
            failures = self.fail.get(kind)
            if failures and kind not in self.commit_then_fail:
                raise failures.pop(0)
            step = Step(
                run_id=run_id, index=len(self.rows), seq=seq, kind=kind, data=data, created_at=now
            )
            self.rows.append(step)
            if failures:
                raise failures.pop(0)
            return step
        finally:
            self.in_flight -= 1

    async def steps(self, run_id: UUID) -> list[Step]:
        self.other_calls.append("steps")
        return list(self.rows)

    def kinds(self) -> list[str]:
        return [r.kind for r in self.rows]


def writer(ledger: Any, **kwargs: Any) -> StepWriter:
    return StepWriter(ledger, FakeClock(), RUN, SEQ, **kwargs)


def teed(w: StepWriter) -> RunChannel:
    return RunChannel(RUN, lambda: {"status": "RUNNING"}, sink=w)


def event(kind: str, cursor: int = 1, **data: Any) -> Event:
    return Event(run_id=RUN, cursor=cursor, kind=kind, data=data)


async def test_token_events_are_never_persisted() -> None:
    ledger = FakeLedger()
    async with writer(ledger) as w:
        ch = teed(w)
        sub = ch.subscribe(0)
        await ch.publish(EventKind.TOKEN, {"delta": "Hel"})
        await ch.publish(EventKind.NODE_STARTED, {"node": "n0"})
        await ch.publish(EventKind.TOKEN, {"delta": "lo"})
        await ch.publish(EventKind.RUN_DONE, {"result": "Hello"})
        await w.write(event(EventKind.TOKEN, delta="direct"))
        await w.barrier()
    assert ledger.appends == [EventKind.NODE_STARTED, EventKind.RUN_DONE]
    assert [r.data for r in ledger.rows] == [{"node": "n0"}, {"result": "Hello"}]
    assert [e.kind for e in await _drain(sub)].count(EventKind.TOKEN) == 2  # still live


async def test_steps_keep_publish_order_with_one_append_in_flight() -> None:
    ledger = FakeLedger()
    ledger.slowness = lambda n: (n * 7) % 5  # appends of uneven speed
    async with writer(ledger) as w:
        ch = teed(w)
        for i in range(60):
            await ch.publish(EventKind.TOKEN if i % 4 == 3 else EventKind.NODE_COMPLETED, {"i": i})
        await ch.publish(EventKind.RUN_DONE, {"i": 60})
        await w.barrier()
    assert [r.data["i"] for r in ledger.rows] == [i for i in range(61) if i % 4 != 3]
    assert [r.index for r in ledger.rows] == list(range(len(ledger.rows)))
    assert {r.seq for r in ledger.rows} == {SEQ}
    assert {r.created_at for r in ledger.rows} == {EPOCH}
    assert ledger.max_in_flight == 1


async def test_barrier_waits_for_the_writer_chain() -> None:
    ledger = FakeLedger()
    ledger.stall = anyio.Event()
    flushed: list[int] = []
    async with writer(ledger) as w:
        ch = teed(w)
        await ch.publish(EventKind.NODE_STARTED)
        await ch.publish(EventKind.NODE_COMPLETED)
        await ch.publish(EventKind.RUN_DONE)

        async def terminal_path() -> None:
            await w.barrier()
            flushed.append(len(ledger.rows))

        async with anyio.create_task_group() as tg:
            tg.start_soon(terminal_path)
            await anyio.wait_all_tasks_blocked()
            assert flushed == [] and ledger.rows == []  # merely scheduled is not flushed
            ledger.stall.set()
    assert flushed == [3]
    assert ledger.kinds()[-1] == EventKind.RUN_DONE


async def test_writer_queue_is_bounded_and_applies_backpressure() -> None:
    assert WRITER_QUEUE_LIMIT == 256
    ledger = FakeLedger()
    ledger.stall = anyio.Event()
    async with writer(ledger) as w:
        await w.write(event(EventKind.NODE_STARTED, n=0))
        await anyio.wait_all_tasks_blocked()  # the first append is in flight, stalled
        for n in range(1, 257):
            await w.write(event(EventKind.NODE_STARTED, n=n))
        assert w.pending == 256
        late: list[int] = []

        async def one_more() -> None:
            await w.write(event(EventKind.NODE_STARTED, n=257))
            late.append(w.pending)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one_more)
            await anyio.wait_all_tasks_blocked()
            assert late == [] and w.pending == 256  # waits for room, queues nothing
            ledger.stall.set()
        await w.barrier()
    assert [r.data["n"] for r in ledger.rows] == list(range(258))


async def test_latched_failure_is_seen_by_every_waiter_of_the_generation() -> None:
    ledger = FakeLedger()
    ledger.stall = anyio.Event()
    boom = Boom("disk full")
    ledger.fail[EventKind.NODE_COMPLETED] = [boom]
    seen: list[StepWriteFailed] = []

    async def wait_barrier(w: StepWriter) -> None:
        try:
            await w.barrier()
        except StepWriteFailed as exc:
            seen.append(exc)

    async with writer(ledger) as w:
        ch = teed(w)
        sub = ch.subscribe(0)
        await ch.publish(EventKind.NODE_STARTED)
        await ch.publish(EventKind.NODE_COMPLETED)
        await ch.publish(EventKind.NODE_STARTED)
        await ch.publish(EventKind.RUN_DONE)
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(wait_barrier, w)
            await anyio.wait_all_tasks_blocked()
            ledger.stall.set()
        await wait_barrier(w)  # a waiter arriving after the failure sees the same one
        assert w.failure is not None
        # Live events are unaffected: the channel still delivered everything, in order.
        assert [e.cursor for e in await _drain(sub)] == [1, 2, 3, 4]

    assert len(seen) == 4
    assert all(e.error is boom and e.__cause__ is boom for e in seen)
    assert {(e.generation, e.kind) for e in seen} == {(1, EventKind.NODE_COMPLETED)}
    assert "node.completed" in str(seen[0]) and "disk full" in str(seen[0])
    # Nothing of that generation lands behind the missing Step.
    assert ledger.kinds() == [EventKind.NODE_STARTED]
    assert ledger.appends == [EventKind.NODE_STARTED, EventKind.NODE_COMPLETED]


async def test_failed_step_append_never_rolls_back_committed_run_truth() -> None:
    proxy = LedgerProxy(make_world().ledger)
    world = make_world(ledger=proxy)
    run = (await world.engine.submit(Intent(pattern="echo"))).run
    await world.worker.perform_run(run.id, run.seq)
    assert proxy.inner.run_table[run.id].status is RunStatus.DONE
    before = world.dump()
    proxy.calls.clear()
    proxy.fail_once("append_step", LedgerUnavailable("connection lost"), after=False)

    async with StepWriter(proxy, world.clock, run.id, run.seq) as w:
        await w.write(Event(run_id=run.id, cursor=1, kind=EventKind.RUN_DONE))
        with pytest.raises(StepWriteFailed, match="LedgerUnavailable: connection lost"):
            await w.barrier()

    assert proxy.calls == ["append_step"]  # the writer touches Steps only, once
    assert world.dump() == before
    assert proxy.inner.run_table[run.id].status is RunStatus.DONE


async def test_repair_retries_the_missing_step_once_in_a_fresh_generation() -> None:
    ledger = FakeLedger()
    ledger.fail[EventKind.RUN_DONE] = [Boom("lost")]
    async with writer(ledger) as w:
        ch = teed(w)
        await ch.publish(EventKind.NODE_STARTED)
        await ch.publish(EventKind.RUN_DONE, {"result": {"ok": True}})
        with pytest.raises(StepWriteFailed) as first:
            await w.barrier()
        assert first.value.generation == 1 and w.generation == 1

        step = await w.repair(EventKind.RUN_DONE, {"result": {"ok": True}})
        assert w.generation == 2 and w.failure is None
        await w.barrier()  # the fresh generation is healthy
    assert (step.kind, step.data, step.seq) == (EventKind.RUN_DONE, {"result": {"ok": True}}, SEQ)
    assert ledger.kinds() == [EventKind.NODE_STARTED, EventKind.RUN_DONE]
    assert ledger.appends.count(EventKind.RUN_DONE) == 2  # the original attempt and one retry


async def test_repair_makes_exactly_one_attempt_and_latches_its_failure() -> None:
    ledger = FakeLedger()
    errors = [Boom("first"), Boom("repair"), Boom("again")]
    ledger.fail[EventKind.RUN_FAILED] = list(errors)
    async with writer(ledger) as w:
        await w.write(event(EventKind.RUN_FAILED))
        with pytest.raises(StepWriteFailed):
            await w.barrier()

        with pytest.raises(StepWriteFailed) as repaired:
            await w.repair(EventKind.RUN_FAILED, {})
        assert repaired.value.generation == 2 and repaired.value.error is errors[1]
        assert ledger.appends.count(EventKind.RUN_FAILED) == 2  # no hidden retry loop
        with pytest.raises(StepWriteFailed) as barrier:
            await w.barrier()
        assert barrier.value.error is errors[1]  # latched on the fresh generation

        with pytest.raises(StepWriteFailed) as again:
            await w.repair(EventKind.RUN_FAILED, {})
        assert again.value.generation == 3 and again.value.error is errors[2]
    assert ledger.appends.count(EventKind.RUN_FAILED) == 3
    assert ledger.rows == []


async def test_repair_does_not_duplicate_a_step_that_already_landed() -> None:
    ledger = FakeLedger()
    ledger.fail[EventKind.RUN_CANCELLED] = [LedgerUnavailable("commit unknown")]
    ledger.commit_then_fail.add(EventKind.RUN_CANCELLED)
    async with writer(ledger) as w:
        await w.write(event(EventKind.RUN_CANCELLED, why="api"))
        with pytest.raises(StepWriteFailed):
            await w.barrier()
        step = await w.repair(EventKind.RUN_CANCELLED, {"why": "api"})
    assert step == ledger.rows[0]
    assert ledger.kinds() == [EventKind.RUN_CANCELLED]
    assert ledger.appends == [EventKind.RUN_CANCELLED]


async def test_concurrent_repairs_share_one_attempt() -> None:
    ledger = FakeLedger()
    ledger.stall = anyio.Event()
    results: list[Step] = []

    async def repair(w: StepWriter) -> None:
        results.append(await w.repair(EventKind.RUN_DONE, {"r": 1}))

    async with writer(ledger) as w:
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(repair, w)
            await anyio.wait_all_tasks_blocked()
            ledger.stall.set()
        assert w.generation == 2
    assert len(results) == 3 and all(r == ledger.rows[0] for r in results)
    assert ledger.appends == [EventKind.RUN_DONE]
    assert ledger.other_calls == ["steps"]


async def test_repair_on_a_fresh_writer_at_startup_uses_the_real_ledger() -> None:
    world = make_world()
    run = (await world.engine.submit(Intent(pattern="echo"))).run
    async with StepWriter(world.ledger, world.clock, run.id, run.seq) as w:
        step = await w.repair(EventKind.RUN_DONE, {"result": {}})
        again = await w.repair(EventKind.RUN_DONE, {"result": {}})  # already there now
    assert w.generation == 3
    assert step == again
    assert [s.kind for s in await world.ledger.steps(run.id)] == [EventKind.RUN_DONE]


async def test_persisted_metadata_is_detached() -> None:
    ledger = FakeLedger()
    async with writer(ledger) as w:
        ch = teed(w)
        sub = ch.subscribe(0)
        data: dict[str, Any] = {"state": {"items": [1]}}
        returned = await ch.publish(EventKind.NODE_COMPLETED, data)
        data["state"]["items"].append("publisher")
        returned.data["state"]["items"].append("returned")
        (await anext(sub)).data["state"]["items"].append("reader")
        await w.barrier()
        repaired = await w.repair(EventKind.NODE_COMPLETED, {"state": {"items": [1]}})
        repaired.data["state"]["items"].append("repair caller")
    assert [r.data for r in ledger.rows] == [{"state": {"items": [1]}}]


async def test_writer_refuses_events_when_not_running() -> None:
    ledger = FakeLedger()
    w = writer(ledger)
    with pytest.raises(StepWriterClosed, match="not running"):
        await w.write(event(EventKind.NODE_STARTED))
    async with w:
        await w.write(event(EventKind.NODE_STARTED))
    with pytest.raises(StepWriterClosed):
        await w.write(event(EventKind.NODE_COMPLETED))
    with pytest.raises(ValueError, match="given to the writer of"):
        await w.write(Event(run_id=UUID(int=8), cursor=1, kind=EventKind.NODE_STARTED))
    assert ledger.kinds() == [EventKind.NODE_STARTED]


async def test_leaving_the_writer_flushes_what_is_queued() -> None:
    ledger = FakeLedger()
    ledger.slowness = lambda n: 3
    async with writer(ledger) as w:
        for n in range(10):
            await w.write(event(EventKind.NODE_STARTED, n=n))
    assert [r.data["n"] for r in ledger.rows] == list(range(10))


async def test_a_failing_body_propagates_unchanged_and_stops_the_writer() -> None:
    ledger = FakeLedger()
    ledger.stall = anyio.Event()
    with pytest.raises(Boom, match="hop failed"):
        async with writer(ledger) as w:
            await w.write(event(EventKind.NODE_STARTED))
            raise Boom("hop failed")
    assert not w.running
    with pytest.raises(StepWriterClosed, match="flush"):
        await w.barrier()  # the stalled Step was never confirmed


async def _drain(sub: Any) -> list[Event]:
    out: list[Event] = []
    while sub.pending:
        out.append(await anext(sub))
    return out
