"""Cancellation that proves containment (seed 000, "Cancellation, mutation,
and recovery"; issue M3 item 7).

CANCELLING commits first; the broker's parent job is abort-fenced and
acknowledged before correlated agent jobs and consents are swept; only when
all acknowledged does CANCELLED appear. Anything short of that leaves a
retryable CANCELLING.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime import cancel as cancel_module
from runtime import faults
from runtime.adapters.memory import broker as broker_module
from runtime.cancel import ABORT_ATTEMPTS, Canceller
from runtime.errors import NotFound
from runtime.graph.transitions import AwaitConsent
from runtime.hop import HopContext
from runtime.keys import hop_key
from runtime.models import AgentJobStatus, ConsentStatus, DeliveryState, RunStatus
from runtime.recovery.reconcile import reconcile_runs
from runtime.seams import JobStatus
from runtime.worker import HopOutcome
from tests.bounds import HANG_S
from tests.unit.fakes import World, pattern_of
from tests.unit.waitkit import FakeAgents, admit, hop, run_of, tables, wait_world

pytestmark = pytest.mark.anyio

State = dict[str, Any]


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shorten the broker's abort poll and the canceller's acknowledgement poll."""
    monkeypatch.setattr(broker_module, "ABORT_POLL_S", 0.01)
    monkeypatch.setattr(cancel_module, "ACK_POLL_S", 0.01)


async def parked_on_delegate(w: World) -> tuple[UUID, UUID]:
    run_id = await admit(w, "delegate")
    assert await hop(w, run_id) is HopOutcome.PARKED
    job_id = run_of(w, run_id).agent_job_id
    assert job_id is not None
    return run_id, job_id


async def test_cancel_commits_cancelling_before_any_containment() -> None:
    agents = FakeAgents()
    w = wait_world(agents=agents)
    run_id, job_id = await parked_on_delegate(w)
    statuses: list[tuple[str, RunStatus]] = []
    w.faults.observe(faults.CANCEL_CANCELLING_COMMITTED,
                     lambda: statuses.append(("committed", run_of(w, run_id).status)))
    agents.on_cancel = lambda _: statuses.append(("agent", run_of(w, run_id).status))

    done = await Canceller(w.deps).cancel(run_id)

    assert statuses == [("committed", RunStatus.CANCELLING), ("agent", RunStatus.CANCELLING)]
    names = [n for n in w.faults.names() if n.startswith("cancel.")]
    assert names == [faults.CANCEL_CANCELLING_COMMITTED, faults.CANCEL_CONTAINED]
    assert done.status is RunStatus.CANCELLED
    assert tables(w).agent_job_table[job_id].status is AgentJobStatus.CANCELLED


async def test_parent_job_is_fenced_and_acknowledged_before_children_are_swept(
    fast_polls: None,
) -> None:
    agents = FakeAgents(block_submit=True)
    w = wait_world(agents=agents)
    agents.log = w.broker.log
    run_id = await admit(w, "delegate")
    key = hop_key(run_id, 0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(w.broker.serve, "runs", w.worker.perform_run, 1)
        with anyio.fail_after(HANG_S):
            while not agents.submitted:  # the live hop is inside its delegate window
                await anyio.sleep(0.01)
        assert w.broker.inner.jobs[key].info.status is JobStatus.ACTIVE
        done = await Canceller(w.deps).cancel(run_id)
        tg.cancel_scope.cancel()

    (job_id,) = agents.submitted
    assert w.broker.log == [f"abort {key}", f"finished {key}", f"agent-cancel {job_id} ack"]
    assert w.broker.inner.jobs[key].info.status is JobStatus.ABORTED
    assert done.status is RunStatus.CANCELLED
    assert tables(w).agent_job_table[job_id].status is AgentJobStatus.CANCELLED
    assert tables(w).delivery_table[(run_id, 0)].state.closed


async def test_cancelled_only_after_every_child_acknowledged_and_consents_swept() -> None:
    agents = FakeAgents(cancel_acks=[False])
    w = wait_world(agents=agents)
    run_id, job_id = await parked_on_delegate(w)
    canceller = Canceller(w.deps)

    first = await canceller.cancel(run_id)
    assert first.status is RunStatus.CANCELLING
    assert faults.CANCEL_CONTAINED not in w.faults.names()
    assert tables(w).agent_job_table[job_id].status is AgentJobStatus.SUBMITTED

    # A later cancel (an operator retry, or startup) finishes it.
    second = await canceller.cancel(run_id)
    assert second.status is RunStatus.CANCELLED
    assert agents.cancels == [job_id, job_id]
    assert tables(w).agent_job_table[job_id].status is AgentJobStatus.CANCELLED


async def test_a_pending_consent_is_cancelled_with_its_run() -> None:
    w = wait_world()
    run_id = await admit(w, "consent_gate")
    assert await hop(w, run_id) is HopOutcome.PARKED
    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None

    done = await Canceller(w.deps).cancel(run_id)
    assert done.status is RunStatus.CANCELLED
    assert tables(w).consent_table[consent_id].status is ConsentStatus.CANCELLED
    assert await w.ledger.readmit_after_consent(run_id, consent_id, w.clock.now()) is None


async def test_startup_retries_a_cancelling_run_to_cancelled() -> None:
    agents = FakeAgents(cancel_acks=[False])
    w = wait_world(agents=agents)
    run_id, _ = await parked_on_delegate(w)
    assert (await Canceller(w.deps).cancel(run_id)).status is RunStatus.CANCELLING

    report = await reconcile_runs(w.engine, w.clock.now())
    assert report.cancelling == {RunStatus.CANCELLED.value: [run_id]}
    assert run_of(w, run_id).status is RunStatus.CANCELLED


async def test_a_hop_that_observes_cancelling_does_not_settle() -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def slow(ctx: HopContext, state: State) -> State:
        entered.set()
        await release.wait()
        return {**state, "finished": True}

    w = wait_world(pattern_of("slow", slow))
    run_id = await admit(w, "slow")
    outcomes: list[HopOutcome] = []

    async def run_hop() -> None:
        outcomes.append(await hop(w, run_id))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_hop)
        await entered.wait()
        assert await w.ledger.begin_cancel(run_id, w.clock.now()) is not None
        release.set()

    assert outcomes == [HopOutcome.FENCED]
    run = run_of(w, run_id)
    assert run.status is RunStatus.CANCELLING and run.result is None
    assert tables(w).delivery_table[(run_id, 0)].state is DeliveryState.CLAIMED

    done = await Canceller(w.deps).cancel(run_id)
    assert done.status is RunStatus.CANCELLED and done.result is None
    assert tables(w).delivery_table[(run_id, 0)].state is DeliveryState.SETTLED


async def test_a_hop_that_observes_cancelling_does_not_park() -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def ask(ctx: HopContext, state: State) -> Any:
        entered.set()
        await release.wait()
        return state, AwaitConsent(then="n1")

    async def after(ctx: HopContext, state: State) -> State:
        return state

    w = wait_world(pattern_of("asking", ask, after))
    run_id = await admit(w, "asking")
    outcomes: list[HopOutcome] = []

    async def run_hop() -> None:
        outcomes.append(await hop(w, run_id))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_hop)
        await entered.wait()
        await w.ledger.begin_cancel(run_id, w.clock.now())
        release.set()

    assert outcomes == [HopOutcome.FENCED]
    assert run_of(w, run_id).status is RunStatus.CANCELLING
    assert tables(w).consent_table == {} and tables(w).checkpoint_table == {}


async def test_completion_that_wins_first_makes_cancel_a_no_op() -> None:
    w = wait_world()
    run_id = await admit(w, "echo")
    assert await hop(w, run_id) is HopOutcome.SETTLED
    before = w.dump()

    done = await Canceller(w.deps).cancel(run_id)

    assert done.status is RunStatus.DONE and done == run_of(w, run_id)
    assert w.dump() == before
    assert w.broker.aborts == []
    assert faults.CANCEL_CANCELLING_COMMITTED not in w.faults.names()


async def test_cancelling_an_unknown_run_is_not_found_and_writes_nothing() -> None:
    w = wait_world()
    await admit(w, "echo")
    before = w.dump()
    ghost = UUID(int=0xC0FFEE)
    with pytest.raises(NotFound) as info:
        await Canceller(w.deps).cancel(ghost)
    assert (info.value.what, info.value.ident) == ("Run", ghost)
    assert str(ghost) in str(info.value)
    assert w.dump() == before and w.broker.aborts == []


async def test_a_lost_abort_acknowledgement_is_retried() -> None:
    w = wait_world()
    run_id = await admit(w, "echo")  # QUEUED, its job waiting in the broker
    key = hop_key(run_id, 0)
    w.broker.lost_abort_acks = 1

    done = await Canceller(w.deps).cancel(run_id)

    assert w.broker.aborts == [key, key]
    assert w.broker.log[:2] == [f"abort-lost {key}", f"abort {key}"]
    assert done.status is RunStatus.CANCELLED
    assert w.broker.inner.jobs[key].info.status is JobStatus.ABORTED
    assert tables(w).delivery_table[(run_id, 0)].state is DeliveryState.FAILED


async def test_abort_never_acknowledged_leaves_retryable_cancelling() -> None:
    w = wait_world()
    run_id = await admit(w, "echo")
    key = hop_key(run_id, 0)
    w.broker.lost_abort_acks = ABORT_ATTEMPTS
    canceller = Canceller(w.deps)

    first = await canceller.cancel(run_id)
    assert first.status is RunStatus.CANCELLING
    assert w.broker.aborts == [key] * ABORT_ATTEMPTS
    assert w.broker.inner.jobs[key].info.status is JobStatus.QUEUED
    # The frozen generation cannot be claimed meanwhile.
    assert await hop(w, run_id) is HopOutcome.SKIPPED

    second = await canceller.cancel(run_id)
    assert second.status is RunStatus.CANCELLED
    assert w.broker.inner.jobs[key].info.status is JobStatus.ABORTED


async def test_concurrent_cancels_elect_one_writer_and_both_see_cancelled() -> None:
    w = wait_world()
    run_id = await admit(w, "echo")
    canceller = Canceller(w.deps)
    results: list[RunStatus] = []

    async def cancel() -> None:
        results.append((await canceller.cancel(run_id)).status)

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel)
        tg.start_soon(cancel)

    assert results == [RunStatus.CANCELLED, RunStatus.CANCELLED]
    assert w.broker.aborts == [hop_key(run_id, 0)]
    assert w.faults.names().count(faults.CANCEL_CONTAINED) == 1


async def test_stasis_is_deleted_only_after_cancelled_commits() -> None:
    w = wait_world(proxy=True)
    run_id = await admit(w, "consent_gate")
    assert await hop(w, run_id) is HopOutcome.PARKED
    assert run_id in tables(w).checkpoint_table
    w.ledger.calls.clear()

    done = await Canceller(w.deps).cancel(run_id)

    assert done.status is RunStatus.CANCELLED
    order = [c for c in w.ledger.calls if c in ("finish_cancel", "delete_checkpoint")]
    assert order == ["finish_cancel", "delete_checkpoint"]
    assert run_id not in tables(w).checkpoint_table


async def test_a_failing_stasis_delete_after_cancel_keeps_cancelled_and_is_retried() -> None:
    w = wait_world(proxy=True)
    run_id = await admit(w, "consent_gate")
    assert await hop(w, run_id) is HopOutcome.PARKED
    w.ledger.fail_once("delete_checkpoint", RuntimeError("disk on fire"), after=False)
    canceller = Canceller(w.deps)

    done = await canceller.cancel(run_id)
    assert done.status is RunStatus.CANCELLED
    assert run_of(w, run_id).status is RunStatus.CANCELLED
    assert run_id in tables(w).checkpoint_table

    # Re-reading the CANCELLED Run repeats the sweep and the cleanup debt.
    again = await canceller.cancel(run_id)
    assert again == done
    assert run_id not in tables(w).checkpoint_table


async def test_a_hop_whose_run_went_cancelling_applies_no_external_effect() -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def gated(ctx: HopContext, state: State) -> State:
        entered.set()
        await release.wait()
        await ctx.effect("deliver", {"x": 1})
        return state

    w = wait_world(pattern_of("gated", gated))
    run_id = await admit(w, "gated")
    outcomes: list[HopOutcome] = []

    async def run_hop() -> None:
        outcomes.append(await hop(w, run_id))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_hop)
        await entered.wait()
        await w.ledger.begin_cancel(run_id, w.clock.now())
        release.set()

    assert outcomes == [HopOutcome.FENCED]
    assert w.effects.calls == [] and w.effects.applied() == {}
    assert run_of(w, run_id).status is RunStatus.CANCELLING
    assert (await Canceller(w.deps).cancel(run_id)).status is RunStatus.CANCELLED
