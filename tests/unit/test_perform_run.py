"""perform_run: exact claim, skip of stale/duplicate hops, execution and fenced settlement."""

from __future__ import annotations

import itertools
from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime import worker as worker_module
from runtime.adapters.memory import MemoryLedger
from runtime.errors import ClaimLost, LedgerUnavailable
from runtime.hop import HopContext
from runtime.models import DeliveryState, Intent, RunStatus, Settlement
from runtime.patterns import default_registry
from runtime.registry import WorkflowRegistry
from runtime.worker import PINNED_PATTERN_UNAVAILABLE, HopOutcome, Worker
from tests.bounds import HANG_S
from tests.unit.fakes import LedgerProxy, World, make_world, pattern_of

pytestmark = pytest.mark.anyio

State = dict[str, Any]


def registry_with(*patterns: Any) -> WorkflowRegistry:
    registry = default_registry()
    for p in patterns:
        registry.register(p)
    return registry


async def admitted(w: World, pattern: str = "echo", **fields: Any) -> UUID:
    sub = await w.engine.submit(Intent(pattern=pattern, **fields))
    return sub.run.id


async def test_claim_moves_queued_run_to_running_and_delivery_to_claimed() -> None:
    seen: list[tuple[RunStatus, DeliveryState, str | None]] = []

    async def observe(ctx: HopContext, state: State) -> State:
        run = ctx.deps.ledger.run_table[ctx.run.id]  # type: ignore[attr-defined]
        d = ctx.deps.ledger.delivery_table[(ctx.run.id, ctx.seq)]  # type: ignore[attr-defined]
        seen.append((run.status, d.state, d.claimed_boot))
        return state

    w = make_world(registry=registry_with(pattern_of("probe", observe)))
    run_id = await admitted(w, "probe")

    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    assert seen == [(RunStatus.RUNNING, DeliveryState.CLAIMED, "boot-1")]
    assert w.ledger.run_table[run_id].status is RunStatus.DONE
    assert w.ledger.delivery_table[(run_id, 0)].state is DeliveryState.SETTLED


async def test_stale_sequence_is_skipped_and_changes_nothing() -> None:
    w = make_world()
    run_id = await admitted(w)
    before = w.dump()
    assert await w.worker.perform_run(run_id, 1) is HopOutcome.SKIPPED
    assert await w.worker.perform_run(UUID(int=999), 0) is HopOutcome.SKIPPED
    assert w.dump() == before


async def test_duplicate_delivery_is_skipped_after_the_hop_settled() -> None:
    w = make_world()
    run_id = await admitted(w)
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    settled = w.dump()
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SKIPPED
    assert w.dump() == settled


async def test_concurrent_duplicate_deliveries_run_the_nodes_once() -> None:
    calls: list[int] = []

    async def count(ctx: HopContext, state: State) -> State:
        calls.append(ctx.seq)
        await anyio.sleep(0.01)
        return state

    w = make_world(registry=registry_with(pattern_of("count", count)))
    run_id = await admitted(w, "count")
    outcomes: list[HopOutcome] = []

    async def hop() -> None:
        outcomes.append(await w.worker.perform_run(run_id, 0))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(hop)

    assert sorted(outcomes) == sorted([HopOutcome.SETTLED, HopOutcome.SKIPPED, HopOutcome.SKIPPED])
    assert calls == [0]


async def test_started_at_is_set_on_the_first_claim_only() -> None:
    w = make_world()
    run_id = await admitted(w)
    first_claim_at = w.clock.now()
    claim = await w.ledger.claim_delivery(run_id, 0, "boot-1", "t0", first_claim_at)
    assert claim.run is not None and claim.run.started_at == first_claim_at

    # A later resume hop (readmission is not in M1: put the Run back to QUEUED at seq 1).
    w.clock.advance(60)
    run = w.ledger.run_table[run_id]
    w.ledger.run_table[run_id] = run.model_copy(update={"status": RunStatus.QUEUED, "seq": 1})
    d0 = w.ledger.delivery_table[(run_id, 0)]
    w.ledger.delivery_table[(run_id, 0)] = d0.model_copy(update={"state": DeliveryState.SETTLED})
    w.ledger.delivery_table[(run_id, 1)] = d0.model_copy(
        update={"seq": 1, "state": DeliveryState.PENDING, "claim_token": None,
                "claimed_boot": None}
    )
    assert await w.worker.perform_run(run_id, 1) is HopOutcome.SETTLED

    final = w.ledger.run_table[run_id]
    assert final.status is RunStatus.DONE
    assert final.started_at == first_claim_at != w.clock.now()


async def test_missing_pinned_pattern_fails_the_run() -> None:
    w = make_world()
    run_id = await admitted(w)
    # A later process knows only a newer echo: the pinned version 1 is gone.
    later = WorkflowRegistry()
    later.register(pattern_of("echo", _ok, version=2))
    hop_worker = Worker(w.deps, later)

    assert await hop_worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    run = w.ledger.run_table[run_id]
    assert run.status is RunStatus.FAILED
    assert run.error == PINNED_PATTERN_UNAVAILABLE
    assert w.ledger.delivery_table[(run_id, 0)].state is DeliveryState.SETTLED


async def test_hop_runs_the_pinned_version_not_the_latest() -> None:
    w = make_world()
    run_id = await admitted(w, prompt="hi")
    w.registry.register(pattern_of("echo", _boom, version=2))
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    run = w.ledger.run_table[run_id]
    assert run.status is RunStatus.DONE
    assert run.result == {"echo": "hi"}


async def _ok(ctx: HopContext, state: State) -> State:
    return {**state, "ok": True}


async def _boom(ctx: HopContext, state: State) -> State:
    raise ValueError("node exploded")


async def test_node_exception_fails_the_run_with_the_error_text() -> None:
    w = make_world(registry=registry_with(pattern_of("bad", _ok, _boom)))
    run_id = await admitted(w, "bad")
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    run = w.ledger.run_table[run_id]
    assert run.status is RunStatus.FAILED
    assert run.error == "ValueError: node exploded"
    assert run.result is None
    assert w.ledger.delivery_table[(run_id, 0)].state is DeliveryState.SETTLED


async def test_done_run_records_the_node_state_as_result() -> None:
    w = make_world()
    run_id = await admitted(w, prompt="hello", content={"k": 1})
    await w.worker.perform_run(run_id, 0)
    assert w.ledger.run_table[run_id].result == {"k": 1, "echo": "hello"}


async def test_settlement_for_an_old_sequence_is_fenced_and_changes_nothing() -> None:
    w = make_world()
    run_id = await admitted(w)
    claim = await w.ledger.claim_delivery(run_id, 0, "boot-1", "t", w.clock.now())
    assert claim.claimed
    before = w.dump()
    late = Settlement(status=RunStatus.DONE, result={"late": True})
    assert await w.ledger.settle_run(run_id, 1, late, w.clock.now()) is None
    assert await w.ledger.settle_run(UUID(int=999), 0, late, w.clock.now()) is None
    assert w.dump() == before


async def test_old_hop_cannot_rewrite_a_run_settled_by_someone_else() -> None:
    """While this hop runs, another boot fails it as lost; the hop's settle is fenced."""

    async def lost_meanwhile(ctx: HopContext, state: State) -> State:
        failed = await ctx.deps.ledger.fail_orphan(
            ctx.run.id, ctx.seq, "boot-2", "lost", ctx.deps.clock.now()
        )
        assert failed is not None
        return {**state, "late": True}

    w = make_world(registry=registry_with(pattern_of("slow", lost_meanwhile)))
    run_id = await admitted(w, "slow")

    assert await w.worker.perform_run(run_id, 0) is HopOutcome.FENCED
    run = w.ledger.run_table[run_id]
    assert (run.status, run.error, run.result) == (RunStatus.FAILED, "lost", None)
    assert w.ledger.delivery_table[(run_id, 0)].state is DeliveryState.FAILED


async def test_settlement_survives_cancellation_right_after_the_nodes_ran() -> None:
    holder: dict[str, anyio.CancelScope] = {}

    async def then_cancel(ctx: HopContext, state: State) -> State:
        holder["scope"].cancel()  # e.g. shutdown arrives as the last node returns
        return {**state, "finished": True}

    w = make_world(registry=registry_with(pattern_of("last", then_cancel)))
    run_id = await admitted(w, "last")

    with anyio.CancelScope() as scope:
        holder["scope"] = scope
        await w.worker.perform_run(run_id, 0)

    assert scope.cancelled_caught, "the cancellation itself still propagates"
    run = w.ledger.run_table[run_id]
    assert run.status is RunStatus.DONE, "the hop's outcome must be settled, not lost"
    assert run.result == {"finished": True}
    assert w.ledger.delivery_table[(run_id, 0)].state is DeliveryState.SETTLED


async def test_settlement_survives_cancellation_during_the_settle_transaction() -> None:
    holder: dict[str, anyio.CancelScope] = {}
    w = make_world()
    run_id = await admitted(w)
    settle = w.ledger.settle_run

    async def cancelled_settle(*args: Any) -> Any:
        holder["scope"].cancel()
        await anyio.sleep(0)  # a checkpoint: unshielded, this would raise Cancelled
        return await settle(*args)

    w.ledger.settle_run = cancelled_settle  # type: ignore[method-assign]
    with anyio.CancelScope() as scope:
        holder["scope"] = scope
        await w.worker.perform_run(run_id, 0)

    assert w.ledger.run_table[run_id].status is RunStatus.DONE


async def test_two_step_applies_its_effect_once_with_a_stable_identity() -> None:
    w = make_world()
    run_id = await admitted(w, "two_step", prompt="ship it")
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SKIPPED

    identity = f"{run_id}:deliver"
    assert w.effects.applied() == {identity: {"prompt": "ship it"}}
    assert [(c.identity, c.applied) for c in w.effects.calls] == [(identity, True)]
    run = w.ledger.run_table[run_id]
    assert run.result == {"prepared": True, "effect": identity, "effect_applied_now": True}

    # The identity does not depend on the hop: a later hop of the same Run reuses it,
    # and the sink refuses to apply it twice.
    later = HopContext(w.deps, run, seq=3)
    assert later.effect_identity("deliver") == identity
    assert await w.deps.effects.apply(identity, run_id, 3, {"prompt": "ship it"}) is False
    assert len(w.effects.applied()) == 1
    # A context that does not hold the Run's claim may not act at all.
    with pytest.raises(ClaimLost):
        await later.effect("deliver", {"prompt": "ship it"})


async def test_closed_claim_gate_makes_a_hop_wait_before_claiming() -> None:
    w = make_world()
    run_id = await admitted(w)
    w.worker.gate.close()
    outcome: list[HopOutcome] = []

    async def hop() -> None:
        outcome.append(await w.worker.perform_run(run_id, 0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(hop)
        await anyio.wait_all_tasks_blocked()
        assert w.ledger.run_table[run_id].status is RunStatus.QUEUED
        assert w.ledger.delivery_table[(run_id, 0)].state is DeliveryState.PUBLISHED
        assert outcome == []
        w.worker.gate.open()

    assert outcome == [HopOutcome.SETTLED]
    assert w.ledger.run_table[run_id].status is RunStatus.DONE


async def test_live_hop_touches_its_broker_job_every_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    period = 0.02
    monkeypatch.setattr(worker_module, "TOUCH_EVERY_S", period)
    three_touches = anyio.Event()

    async def long_node(ctx: HopContext, state: State) -> State:
        with anyio.fail_after(HANG_S):
            await three_touches.wait()
        return state

    w = make_world(registry=registry_with(pattern_of("long", long_node)))
    w.broker.on_touch = lambda key: three_touches.set() if len(w.broker.touches) >= 3 else None
    run_id = await admitted(w, "long")

    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED

    keys = {key for key, _ in w.broker.touches}
    assert keys == {f"run:{run_id}:0"}
    times = [t for _, t in w.broker.touches]
    assert times[0] >= period * 0.9
    assert all(b - a >= period * 0.9 for a, b in itertools.pairwise(times))
    # Touching stops when the hop returns.
    count = len(w.broker.touches)
    await anyio.sleep(period * 4)
    assert len(w.broker.touches) == count


def test_touch_period_and_heartbeat_are_the_seed_values() -> None:
    from runtime.engine import HEARTBEAT_S

    assert worker_module.TOUCH_EVERY_S == 30
    assert HEARTBEAT_S == 120
    assert worker_module.TOUCH_EVERY_S * 4 == HEARTBEAT_S


async def test_claim_retried_after_an_ambiguous_commit_is_recognised_as_ours() -> None:
    proxy = LedgerProxy(MemoryLedger())
    proxy.fail_once("claim_delivery", LedgerUnavailable("reset after commit"), after=True)
    w = make_world(ledger=proxy)
    run_id = await admitted(w)
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    assert proxy.calls.count("claim_delivery") == 2
    assert w.ledger.inner.run_table[run_id].status is RunStatus.DONE


async def test_settle_retried_after_an_ambiguous_commit_is_not_reported_fenced() -> None:
    proxy = LedgerProxy(MemoryLedger())
    proxy.fail_once("settle_run", LedgerUnavailable("reset after commit"), after=True)
    w = make_world(ledger=proxy)
    run_id = await admitted(w)
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    assert proxy.calls.count("settle_run") == 2
    assert w.ledger.inner.run_table[run_id].status is RunStatus.DONE


def test_live_hop_touches_every_30_virtual_seconds_on_trio_mock_clock() -> None:
    """Exact cadence with the real TOUCH_EVERY_S, on trio's virtual clock."""
    import trio
    import trio.testing

    async def long_node(ctx: HopContext, state: State) -> State:
        await anyio.sleep(95)
        return state

    w = make_world(registry=registry_with(pattern_of("long", long_node)))

    async def main() -> tuple[HopOutcome, float]:
        run_id = await admitted(w, "long")
        start = anyio.current_time()
        outcome = await w.worker.perform_run(run_id, 0)
        await anyio.sleep(120)  # nothing touches after the hop returned
        return outcome, start

    outcome, start = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert outcome is HopOutcome.SETTLED
    assert [round(t - start, 6) for _, t in w.broker.touches] == [30.0, 60.0, 90.0]
