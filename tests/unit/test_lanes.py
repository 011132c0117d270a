"""The two in-process lanes, `runs` and `rites`: bounded concurrency and end to end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from runtime.hop import HopContext
from runtime.models import DeliveryState, Intent, RunStatus
from runtime.patterns import default_registry
from runtime.seams import JobStatus
from runtime.worker import Lanes
from tests.unit.fakes import World, make_world, pattern_of

pytestmark = pytest.mark.anyio


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not cond():
            await anyio.sleep(0.005)


async def test_submit_then_lanes_serve_to_done_on_the_memory_broker() -> None:
    w = make_world()
    echo = await w.engine.submit(Intent(pattern="echo", prompt="hi"))
    two = await w.engine.submit(Intent(pattern="two_step", prompt="go"))
    ids = (echo.run.id, two.run.id)

    async with anyio.create_task_group() as tg:
        tg.start_soon(Lanes(w.worker).serve)
        await until(lambda: all(w.ledger.run_table[i].status.terminal for i in ids))
        await until(lambda: all(s.finished for s in w.broker.inner.statuses().values()))
        tg.cancel_scope.cancel()

    for rid in ids:
        assert w.ledger.run_table[rid].status is RunStatus.DONE
        assert w.ledger.delivery_table[(rid, 0)].state is DeliveryState.SETTLED
    assert w.ledger.run_table[echo.run.id].result == {"echo": "hi"}
    assert set(w.broker.inner.statuses().values()) == {JobStatus.COMPLETE}
    assert len(w.effects.applied()) == 1


async def test_each_lane_bounds_its_own_concurrency() -> None:
    active = {"runs": 0, "rites": 0}
    peak = {"runs": 0, "rites": 0}
    release = anyio.Event()

    def blocking(lane: str) -> Any:
        async def node(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
            active[lane] += 1
            peak[lane] = max(peak[lane], active[lane])
            await release.wait()
            active[lane] -= 1
            return state

        return node

    registry = default_registry()
    registry.register(pattern_of("fg", blocking("runs")))
    registry.register(pattern_of("bg", blocking("rites"), queue="rites"))
    w: World = make_world(registry=registry)
    runs = [await w.engine.submit(Intent(pattern="fg", prompt=str(i))) for i in range(5)]
    rites = [await w.engine.submit(Intent(pattern="bg", prompt=str(i))) for i in range(3)]
    assert {s.run.queue for s in rites} == {"rites"}

    async with anyio.create_task_group() as tg:
        tg.start_soon(Lanes(w.worker, concurrency={"runs": 2, "rites": 1}).serve)
        await until(lambda: active == {"runs": 2, "rites": 1})
        await anyio.sleep(0.05)  # give the lanes every chance to over-admit
        assert active == {"runs": 2, "rites": 1}
        queued = [s for s in runs + rites
                  if w.ledger.run_table[s.run.id].status is RunStatus.QUEUED]
        assert len(queued) == 5
        release.set()
        await until(lambda: all(w.ledger.run_table[s.run.id].status.terminal
                                for s in runs + rites))
        tg.cancel_scope.cancel()

    assert peak == {"runs": 2, "rites": 1}
    assert {w.ledger.run_table[s.run.id].status for s in runs + rites} == {RunStatus.DONE}
