"""A hop of the live boot whose broker job ended under its claim is recovered
by the relay in that same boot (runtime.recovery.orphans, `abandoned`).

Seed 000_81a5c720b14d934a.txt: "Admission and exact claim" (the 120 s
heartbeat makes an abandoned active job sweepable; settlement is fenced by the
claim) and "Cancellation, mutation, and recovery" (orphans are parked at an
exact window or contained and failed, never guessed forward). A sweep whose
clock runs ahead aborts the job of a hop that is still running; its worker
cancels the hop, and before this fix nothing in the boot ever settled the Run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime.adapters.memory import MemoryBroker
from runtime.cancel import Canceller
from runtime.models import DeliveryState, Intent, RunStatus
from runtime.recovery.orphans import ABANDONED
from runtime.recovery.relay import Relays
from runtime.seams import JobStatus
from tests.unit.fakes import FakeClock, World, make_world, pattern_of
from tests.unit.test_perform_run import registry_with

pytestmark = pytest.mark.anyio


def blocking_world() -> tuple[World, anyio.Event]:
    """A world whose `block` Pattern holds its hop until the test lets it go."""
    entered = anyio.Event()
    release = anyio.Event()

    async def hold(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return state

    return make_world(registry=registry_with(pattern_of("block", hold))), entered


async def running_hop(w: World, entered: anyio.Event, tg: Any) -> tuple[UUID, anyio.CancelScope]:
    """Admit a `block` Run, dequeue its job and start its hop; return once it runs."""
    run_id = (await w.engine.submit(Intent(pattern="block"))).run.id
    queue = w.ledger.delivery_table[(run_id, 0)].queue
    assert (await w.broker.inner.dequeue(queue)) is not None  # the job is ACTIVE now
    scope = anyio.CancelScope()

    async def hop() -> None:
        with scope:
            await w.worker.perform_run(run_id, 0)

    tg.start_soon(hop)
    await entered.wait()
    return run_id, scope


async def skewed_sweep(w: World, queue: str) -> list[str]:
    """Another process sweeps the same broker tables with its clock 200 s ahead."""
    ahead = FakeClock(w.clock.now() + timedelta(seconds=200))
    return await MemoryBroker(ahead, jobs=w.broker.inner.jobs).sweep(queue)


def relays_of(w: World) -> Relays:
    return Relays(w.engine, w.clock.now(), Canceller(w.deps), live_claims=w.worker.live_claims)


async def test_a_swept_hop_that_its_worker_cancelled_is_failed_in_the_same_boot() -> None:
    w, entered = blocking_world()
    async with anyio.create_task_group() as tg:
        run_id, scope = await running_hop(w, entered, tg)
        token = w.ledger.delivery_table[(run_id, 0)].claim_token
        assert token in w.worker.live_claims  # the running hop holds its claim
        key = w.ledger.delivery_table[(run_id, 0)].key
        assert await skewed_sweep(w, w.ledger.delivery_table[(run_id, 0)].queue) == [key]
        scope.cancel()  # what the worker does once it sees its job aborted
    assert token not in w.worker.live_claims
    assert w.ledger.run_table[run_id].status is RunStatus.RUNNING  # nobody settled it

    await relays_of(w).pass_once()

    run = w.ledger.run_table[run_id]
    assert (run.status, run.error) == (RunStatus.FAILED, ABANDONED)
    assert w.ledger.delivery_table[(run_id, 0)].state is DeliveryState.FAILED
    assert [s.kind for s in w.ledger.step_log[run_id]][-1] == "run.failed"


async def test_a_hop_still_running_is_left_alone_even_with_its_job_swept() -> None:
    w, entered = blocking_world()
    async with anyio.create_task_group() as tg:
        run_id, scope = await running_hop(w, entered, tg)
        await skewed_sweep(w, w.ledger.delivery_table[(run_id, 0)].queue)
        await relays_of(w).pass_once()  # the worker has not cancelled the hop yet
        assert w.ledger.run_table[run_id].status is RunStatus.RUNNING
        scope.cancel()


async def test_a_claim_whose_job_is_still_live_is_left_to_the_next_pass() -> None:
    w, entered = blocking_world()
    async with anyio.create_task_group() as tg:
        run_id, scope = await running_hop(w, entered, tg)
        scope.cancel()  # the hop is gone, but its job is still ACTIVE
    key = w.ledger.delivery_table[(run_id, 0)].key
    assert w.jobs()[key].status is JobStatus.ACTIVE
    relays = relays_of(w)

    await relays.pass_once()
    assert w.ledger.run_table[run_id].status is RunStatus.RUNNING

    await w.broker.inner.finish(key, JobStatus.ABORTED, error="swept")
    await relays.pass_once()
    assert w.ledger.run_table[run_id].status is RunStatus.FAILED


async def test_a_relay_without_the_workers_claims_leaves_every_own_claim_alone() -> None:
    w, entered = blocking_world()
    async with anyio.create_task_group() as tg:
        run_id, scope = await running_hop(w, entered, tg)
        await skewed_sweep(w, w.ledger.delivery_table[(run_id, 0)].queue)
        scope.cancel()
    await Relays(w.engine, w.clock.now(), Canceller(w.deps)).pass_once()
    assert w.ledger.run_table[run_id].status is RunStatus.RUNNING


async def test_a_cancel_that_wins_the_race_keeps_the_run_cancelled() -> None:
    """The abandonment failure is fenced by the exact claim and status: a Run the
    operator cancelled first is not rewritten as failed."""
    w, entered = blocking_world()
    async with anyio.create_task_group() as tg:
        run_id, scope = await running_hop(w, entered, tg)
        await skewed_sweep(w, w.ledger.delivery_table[(run_id, 0)].queue)
        scope.cancel()
    canceller = Canceller(w.deps)
    assert (await canceller.cancel(run_id)).status is RunStatus.CANCELLED
    await relays_of(w).pass_once()
    assert w.ledger.run_table[run_id].status is RunStatus.CANCELLED


async def test_a_hop_that_failed_out_of_its_job_stays_for_restart() -> None:
    """A FAILED job means the hop raised (say, its settlement gave up on the
    database): persistent failure stays explicit nonterminal truth in this boot,
    with no same-boot failure-custody watchdog; restart reconciliation ends it."""
    w, entered = blocking_world()
    async with anyio.create_task_group() as tg:
        run_id, scope = await running_hop(w, entered, tg)
        scope.cancel()
    key = w.ledger.delivery_table[(run_id, 0)].key
    await w.broker.inner.finish(key, JobStatus.FAILED, error="LedgerUnavailable")
    await relays_of(w).pass_once()
    assert w.ledger.run_table[run_id].status is RunStatus.RUNNING
