"""Runtime mutation (seed 000, "Cancellation, mutation, and recovery"): the
pre-claim gate closes, hops in flight drain, the gate reopens afterwards."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from runtime.hop import HopContext
from runtime.models import Intent, RunStatus
from runtime.mutation import DrainTimeout, broadcast_soft_stop, pause_queues
from runtime.worker import HopOutcome
from tests.unit.fakes import make_world, pattern_of
from tests.unit.test_perform_run import registry_with

pytestmark = pytest.mark.anyio


def _blocking() -> tuple[Any, anyio.Event, anyio.Event]:
    started, release = anyio.Event(), anyio.Event()

    async def body(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
        started.set()
        await release.wait()
        return state

    return body, started, release


async def test_pause_waits_for_hops_in_flight_and_holds_new_claims() -> None:
    body, started, release = _blocking()
    w = make_world(registry=registry_with(pattern_of("slow", body)))
    slow = (await w.engine.submit(Intent(pattern="slow"))).run.id
    quick = (await w.engine.submit(Intent(pattern="echo"))).run.id
    order: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(w.worker.perform_run, slow, 0)
        await started.wait()

        async def mutate() -> None:
            async with pause_queues(w.worker, drain_timeout_s=5):
                order.append("mutation")
                assert w.worker.in_flight == 0

        tg.start_soon(mutate)
        await anyio.sleep(0.05)
        assert not w.worker.gate.is_open
        tg.start_soon(w.worker.perform_run, quick, 0)
        await anyio.sleep(0.05)
        assert w.ledger.run_table[quick].status is RunStatus.QUEUED  # waiting before its claim
        order.append("release")
        release.set()
    assert order == ["release", "mutation"]
    assert w.worker.gate.is_open
    assert w.ledger.run_table[quick].status is RunStatus.DONE


async def test_pause_reopens_the_gate_after_a_drain_timeout() -> None:
    body, started, release = _blocking()
    w = make_world(registry=registry_with(pattern_of("slow", body)))
    slow = (await w.engine.submit(Intent(pattern="slow"))).run.id
    async with anyio.create_task_group() as tg:
        tg.start_soon(w.worker.perform_run, slow, 0)
        await started.wait()
        with pytest.raises(DrainTimeout):
            async with pause_queues(w.worker, drain_timeout_s=0.1):
                pytest.fail("the mutation must not run while a hop holds its claim")
        assert w.worker.gate.is_open
        release.set()


async def test_pause_reopens_the_gate_when_the_mutation_fails() -> None:
    w = make_world()
    with pytest.raises(RuntimeError):
        async with pause_queues(w.worker):
            raise RuntimeError("mutation failed")
    assert w.worker.gate.is_open
    run = (await w.engine.submit(Intent(pattern="echo"))).run.id
    assert await w.worker.perform_run(run, 0) is HopOutcome.SETTLED


def test_broadcast_soft_stop_is_a_no_op() -> None:
    assert broadcast_soft_stop() is None


async def test_a_claim_still_in_flight_holds_the_mutation_until_it_lands() -> None:
    """Found by mutation_quiesced (runtime_mutation, swarm seed 90): a hop past the
    gate whose claim commit was slow did not count, so the change began and the
    claim committed under it. A hop now counts from the gate on."""
    w = make_world()
    run = (await w.engine.submit(Intent(pattern="echo"))).run.id
    claiming, land = anyio.Event(), anyio.Event()
    claim = w.ledger.claim_delivery

    async def slow_claim(*args: Any) -> Any:
        claiming.set()
        await land.wait()
        return await claim(*args)

    w.ledger.claim_delivery = slow_claim  # type: ignore[method-assign]
    order: list[str] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(w.worker.perform_run, run, 0)
        await claiming.wait()
        assert w.worker.in_flight == 1

        async def mutate() -> None:
            async with pause_queues(w.worker, drain_timeout_s=5):
                order.append("mutation")

        tg.start_soon(mutate)
        await anyio.sleep(0.3)
        assert order == []
        order.append("claim lands")
        land.set()
    assert order == ["claim lands", "mutation"]
    assert w.ledger.run_table[run].status is RunStatus.DONE
