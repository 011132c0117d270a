"""Group commit in the Step writer (seed 000_81a5c720b14d934a.txt, "Events, settlement,
and waits"): with a ledger that offers `append_steps`, the one append in flight carries
every Step queued in its generation meanwhile, all or none, in publish order; a failed
group latches like a failed append; a repair is never grouped."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime.events import EventKind, StepWriteFailed
from runtime.events.writer import GROUP_COMMIT_LIMIT
from runtime.models import Step
from tests.unit.test_step_writer import Boom, FakeLedger, event, writer

pytestmark = pytest.mark.anyio


class BatchingLedger(FakeLedger):
    """FakeLedger plus `append_steps`: `groups` records the kinds of each call;
    `fail_group[kind]` fails (before committing) the groups that start with `kind`."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[list[str]] = []
        self.fail_group: dict[str, list[BaseException]] = {}

    async def append_steps(
        self, run_id: UUID, seq: int, items: Sequence[tuple[str, dict[str, Any]]], now: datetime
    ) -> list[Step]:
        self.groups.append([kind for kind, _ in items])
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.stall is not None:
                await self.stall.wait()
            failures = self.fail_group.get(items[0][0])
            if failures:
                raise failures.pop(0)
            steps = [
                Step(run_id=run_id, index=len(self.rows) + i, seq=seq, kind=kind, data=data,
                     created_at=now)
                for i, (kind, data) in enumerate(items)
            ]
            self.rows.extend(steps)
            return steps
        finally:
            self.in_flight -= 1


async def test_steps_queued_behind_an_append_share_the_next_one() -> None:
    ledger = BatchingLedger()
    ledger.stall = anyio.Event()
    async with writer(ledger) as w:
        await w.write(event(EventKind.RUN_CLAIMED, n=0))
        await anyio.wait_all_tasks_blocked()  # the first append is in flight, stalled
        for n in range(1, 5):
            await w.write(event(EventKind.NODE_STARTED, n=n))
        await w.write(event(EventKind.TOKEN, n=99))  # live only: never grouped in
        await w.write(event(EventKind.RUN_DONE, n=5))
        ledger.stall.set()
        await w.barrier()
    assert ledger.appends == [EventKind.RUN_CLAIMED]  # alone: nothing was queued yet
    assert ledger.groups == [[EventKind.NODE_STARTED] * 4 + [EventKind.RUN_DONE]]
    assert [r.data["n"] for r in ledger.rows] == [0, 1, 2, 3, 4, 5]
    assert [r.index for r in ledger.rows] == list(range(6))
    assert ledger.max_in_flight == 1


async def test_a_group_is_bounded() -> None:
    ledger = BatchingLedger()
    ledger.stall = anyio.Event()
    async with writer(ledger) as w:
        await w.write(event(EventKind.NODE_STARTED, n=0))
        await anyio.wait_all_tasks_blocked()
        for n in range(1, GROUP_COMMIT_LIMIT + 11):
            await w.write(event(EventKind.NODE_STARTED, n=n))
        ledger.stall.set()
        await w.barrier()
    assert [len(g) for g in ledger.groups] == [GROUP_COMMIT_LIMIT, 10]
    assert [r.data["n"] for r in ledger.rows] == list(range(GROUP_COMMIT_LIMIT + 11))


async def test_a_failed_group_latches_with_its_first_kind_and_drops_the_rest() -> None:
    ledger = BatchingLedger()
    ledger.stall = anyio.Event()
    ledger.fail_group[EventKind.NODE_STARTED] = [Boom("disk full")]
    async with writer(ledger) as w:
        await w.write(event(EventKind.RUN_CLAIMED))
        await anyio.wait_all_tasks_blocked()
        await w.write(event(EventKind.NODE_STARTED))
        await w.write(event(EventKind.NODE_COMPLETED))
        ledger.stall.set()
        await anyio.wait_all_tasks_blocked()  # the group has failed
        await w.write(event(EventKind.RUN_DONE))  # behind the missing Steps: dropped
        with pytest.raises(StepWriteFailed) as failed:
            await w.barrier()
        assert failed.value.kind == EventKind.NODE_STARTED
        assert w.failure is not None and w.failure.kind == EventKind.NODE_STARTED
    assert ledger.kinds() == [EventKind.RUN_CLAIMED]  # all or none: no part of the group
    assert ledger.groups == [[EventKind.NODE_STARTED, EventKind.NODE_COMPLETED]]


async def test_a_repair_is_never_grouped_with_the_steps_behind_it() -> None:
    ledger = BatchingLedger()
    ledger.fail[EventKind.RUN_DONE] = [Boom("lost")]
    async with writer(ledger) as w:
        await w.write(event(EventKind.RUN_DONE, result=1))
        with pytest.raises(StepWriteFailed):
            await w.barrier()
        ledger.stall = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(w.repair, EventKind.RUN_DONE, {"result": 1})
            await anyio.wait_all_tasks_blocked()  # the repair's append is in flight
            await w.write(event(EventKind.NODE_STARTED, n=1))
            await w.write(event(EventKind.NODE_STARTED, n=2))
            ledger.stall.set()
        await w.barrier()
    assert ledger.appends == [EventKind.RUN_DONE, EventKind.RUN_DONE]  # failed, then repaired
    assert ledger.groups == [[EventKind.NODE_STARTED, EventKind.NODE_STARTED]]
    assert ledger.kinds() == [EventKind.RUN_DONE, EventKind.NODE_STARTED, EventKind.NODE_STARTED]
