"""The lingering Step writer (issue 17, M14): a hop's writer holds an append nobody
waits for at most `linger_s`, so its settlement can take the queued Steps
(`take_pending`) and write them in its own transaction; a barrier, closing or a
full group ends the linger at once, Steps taken are given back in order by
`restore`, and nothing is taken while an append is in flight or a failure is
latched (the order and one-in-flight rules of the writer stay as they were)."""

from __future__ import annotations

import anyio
import pytest

from runtime.events import EventKind, StepWriteFailed
from tests.unit.test_step_writer import Boom, event, writer
from tests.unit.test_step_writer_groups import BatchingLedger

pytestmark = pytest.mark.anyio

LONG = 30.0  # far longer than any test waits: only the writer's rules end a linger


async def test_a_lingering_writer_holds_steps_until_a_barrier_wants_them() -> None:
    ledger = BatchingLedger()
    async with writer(ledger, linger_s=LONG) as w:
        await w.write(event(EventKind.RUN_CLAIMED, n=0))
        await w.write(event(EventKind.NODE_STARTED, n=1))
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
        assert ledger.groups == [] and w.pending == 2  # held, not written
        with anyio.fail_after(5):
            await w.barrier()
        assert ledger.groups == [["run.claimed", "node.started"]]


async def test_without_a_waiter_the_linger_ends_by_its_bound() -> None:
    ledger = BatchingLedger()
    async with writer(ledger, linger_s=0.05) as w:
        await w.write(event(EventKind.RUN_CLAIMED, n=0))
        with anyio.fail_after(5):
            while not ledger.rows:
                await anyio.sleep(0.01)
        assert ledger.kinds() == ["run.claimed"]


async def test_taken_steps_leave_the_writer_and_nothing_is_written_twice() -> None:
    ledger = BatchingLedger()
    async with writer(ledger, linger_s=LONG) as w:
        await w.write(event(EventKind.RUN_CLAIMED, n=0))
        await w.write(event(EventKind.NODE_STARTED, n=1))
        await w.wait_idle()
        assert w.take_pending() == [("run.claimed", {"n": 0}), ("node.started", {"n": 1})]
        assert w.pending == 0 and w.quiescent
        with anyio.fail_after(5):
            await w.barrier()  # nothing of this writer's is owed any more
    assert ledger.groups == []


async def test_restored_steps_are_written_ahead_of_later_ones() -> None:
    ledger = BatchingLedger()
    async with writer(ledger, linger_s=LONG) as w:
        await w.write(event(EventKind.RUN_CLAIMED, n=0))
        taken = w.take_pending()
        assert taken is not None
        await w.write(event(EventKind.NODE_STARTED, n=1))
        assert w.restore(taken)
        with anyio.fail_after(5):
            await w.barrier()
    assert [s.kind for s in ledger.rows] == ["run.claimed", "node.started"]


async def test_nothing_is_taken_while_an_append_is_in_flight() -> None:
    ledger = BatchingLedger()
    ledger.stall = anyio.Event()
    async with writer(ledger) as w:  # no linger: the first Step goes at once
        await w.write(event(EventKind.RUN_CLAIMED, n=0))
        with anyio.fail_after(5):
            while ledger.in_flight == 0:
                await anyio.lowlevel.checkpoint()
        await w.write(event(EventKind.NODE_STARTED, n=1))
        assert w.take_pending() is None  # run.claimed may not have landed yet
        ledger.stall.set()
        with anyio.fail_after(5):
            await w.wait_idle()
            while w.pending:  # node.started went in the next append
                await anyio.lowlevel.checkpoint()
            await w.wait_idle()
        assert w.take_pending() == []
    assert [s.kind for s in ledger.rows] == ["run.claimed", "node.started"]


async def test_nothing_is_taken_behind_a_latched_failure() -> None:
    ledger = BatchingLedger()
    ledger.fail["run.claimed"] = [Boom("lost")]  # a group of one is append_step
    async with writer(ledger) as w:
        await w.write(event(EventKind.RUN_CLAIMED, n=0))
        with pytest.raises(StepWriteFailed):
            with anyio.fail_after(5):
                await w.barrier()
        await w.write(event(EventKind.NODE_STARTED, n=1))
        with pytest.raises(StepWriteFailed):
            await w.wait_idle()
        assert w.take_pending() is None
    assert ledger.rows == []


def test_a_negative_linger_is_refused() -> None:
    with pytest.raises(ValueError):
        writer(BatchingLedger(), linger_s=-1)
