"""The faults that strike one call (sim.faults.struck): the injector notes every fault
it fires into the record of the call's task context, tasks the call spawns included,
and never a fault fired outside it (cancel_completes excuses only those)."""

from __future__ import annotations

import random

import anyio
import pytest

from sim.faults import struck
from sim.faults.injector import Injector
from sim.faults.options import FaultOptions
from sim.faults.plan import FaultKind

pytestmark = pytest.mark.anyio


def _always_failing() -> Injector:
    return Injector(FaultOptions(actor_fail_per_call=1.0), random.Random(1))


async def test_a_watched_call_records_its_own_faults_and_its_tasks_faults() -> None:
    injector = _always_failing()
    outside = anyio.Event()

    async def elsewhere() -> None:
        await outside.wait()
        injector.hit("actor.agent.submit", (FaultKind.ACTOR_FAIL,))

    async with anyio.create_task_group() as world:
        world.start_soon(elsewhere)  # spawned before the watch: not the call's task
        with struck.watching() as faults:
            injector.hit("actor.agent.cancel", (FaultKind.ACTOR_FAIL,))
            async def abort() -> None:
                injector.hit("broker.abort", (FaultKind.ACTOR_FAIL,))

            async with anyio.create_task_group() as call:
                call.start_soon(abort)
            outside.set()
            await anyio.sleep(0.01)
    assert faults == ["actor.agent.cancel:actor_fail", "broker.abort:actor_fail"]


async def test_no_watch_no_record_and_no_fault_nothing_recorded() -> None:
    injector = _always_failing()
    injector.hit("actor.agent.cancel", (FaultKind.ACTOR_FAIL,))  # nobody watches: no error
    quiet = Injector(FaultOptions(), random.Random(1))
    with struck.watching() as faults:
        quiet.hit("actor.agent.cancel", (FaultKind.ACTOR_FAIL,))
    assert faults == []
