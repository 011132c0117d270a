"""A hop's cost in ledger transactions (issue 17, M14): the terminal Step, and the
lifecycle Steps the lingering writer still holds, ride in settle_run's transaction
when no append is in flight, and a fresh hop that never checkpointed skips the
checkpoint deletion. Neither may change what is durable:
the same Steps in the same order, the same truth, and a Step failure still
never touches truth (the hop then settles alone and owes its terminal Step)."""

from __future__ import annotations

from uuid import UUID

import anyio
import pytest

from runtime.adapters.memory import MemoryLedger
from runtime.errors import LedgerUnavailable
from runtime.hop import HopContext, Stasis
from runtime.models import DeliveryState, Intent, ResumeMode, RunDelivery, RunStatus
from runtime.seams import Deps
from runtime.worker import HopOutcome, _may_hold_checkpoint
from tests.unit.fakes import LedgerProxy, World, make_world, pattern_of
from tests.unit.test_perform_run import registry_with

pytestmark = pytest.mark.anyio


async def admitted(w: World, pattern: str = "echo") -> UUID:
    return (await w.engine.submit(Intent(pattern=pattern))).run.id


async def _slow(ctx: HopContext, state: dict[str, object]) -> dict[str, object]:
    await anyio.sleep(Deps.step_linger_s * 4)  # longer than the writer lingers
    return state


def slow_world(proxy: LedgerProxy) -> World:
    return make_world(ledger=proxy, registry=registry_with(pattern_of("slow", _slow)))


async def test_an_echo_hop_settles_with_its_terminal_step_and_deletes_nothing() -> None:
    proxy = LedgerProxy(MemoryLedger())
    w = make_world(ledger=proxy)
    run_id = await admitted(w)
    proxy.calls.clear()
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    # How the lifecycle Steps group depends on scheduling; the terminal one is not
    # appended after truth: settle_run is the hop's last transaction.
    assert "delete_checkpoint" not in proxy.calls
    assert proxy.calls[0] == "claim_delivery" and proxy.calls[-1] == "settle_run"
    assert proxy.calls.count("settle_run") == 1
    # A short hop: every Step rides in the settlement, the hop's one write after its claim.
    assert proxy.calls == ["claim_delivery", "settle_run"]
    steps = proxy.inner.step_log[run_id]
    assert [s.kind for s in steps] == ["run.claimed", "node.started", "node.completed",
                                       "run.done"]
    assert [s.index for s in steps] == list(range(len(steps)))
    assert steps[-1].data == {"error": None}
    assert proxy.inner.run_table[run_id].status is RunStatus.DONE
    assert await proxy.inner.evidence_debts(None, 10) == []
    assert run_id not in w.worker.evidence_debt


async def test_a_hop_longer_than_the_linger_writes_its_first_steps_then_folds_the_rest() -> None:
    proxy = LedgerProxy(MemoryLedger())
    w = slow_world(proxy)
    run_id = await admitted(w, "slow")
    proxy.calls.clear()
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    # run.claimed and node.started were appended while the node ran; node.completed
    # was still held when the hop settled, and rides with run.done.
    assert proxy.calls == ["claim_delivery", "append_steps", "settle_run"]
    steps = proxy.inner.step_log[run_id]
    assert [(s.index, s.kind) for s in steps] == [
        (0, "run.claimed"), (1, "node.started"), (2, "node.completed"), (3, "run.done")]
    assert run_id not in w.worker.evidence_debt


async def test_a_fenced_folded_settlement_gives_its_lifecycle_steps_back() -> None:
    proxy = LedgerProxy(MemoryLedger())
    w = make_world(ledger=proxy)
    run_id = await admitted(w)
    settle = proxy.inner.settle_run
    fenced: list[object] = []

    async def fenced_out(*args: object, **kwargs: object) -> None:
        fenced.append(kwargs.get("before", args[5] if len(args) > 5 else ()))
        return None

    proxy.inner.settle_run = fenced_out  # type: ignore[method-assign]
    try:
        assert await w.worker.perform_run(run_id, 0) is HopOutcome.FENCED
    finally:
        proxy.inner.settle_run = settle  # type: ignore[method-assign]
    assert fenced and list(fenced[0]) == [  # type: ignore[call-overload]
        ("run.claimed", {"seq": 0}), ("node.started", {"node": "echo"}),
        ("node.completed", {"node": "echo"})]
    # The writer wrote them after all, in order; no terminal Step (nothing settled).
    assert [s.kind for s in proxy.inner.step_log[run_id]] == [
        "run.claimed", "node.started", "node.completed"]
    assert run_id not in w.worker.evidence_debt


async def test_a_failed_earlier_step_makes_the_hop_settle_alone_and_owe() -> None:
    proxy = LedgerProxy(MemoryLedger())
    proxy.fail_once("append_steps", LedgerUnavailable("lost before commit"), after=False)
    proxy.fail_once("append_step", LedgerUnavailable("lost before commit"), after=False)
    w = slow_world(proxy)  # the first Steps are appended (and fail) while the node runs
    run_id = await admitted(w, "slow")
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    # Truth stands; the latched writer wrote nothing after the missing Step, so the
    # terminal Step is owed to the relay's repair, exactly as before the fold.
    assert proxy.inner.run_table[run_id].status is RunStatus.DONE
    assert proxy.inner.delivery_table[(run_id, 0)].state is DeliveryState.SETTLED
    kinds = [s.kind for s in proxy.inner.step_log.get(run_id, [])]
    assert "run.done" not in kinds
    assert w.worker.evidence_debt == {run_id: 0}
    assert [r.id for r in await proxy.inner.evidence_debts(None, 10)] == [run_id]


async def test_an_ambiguous_folded_settlement_writes_one_terminal_step() -> None:
    proxy = LedgerProxy(MemoryLedger())
    proxy.fail_once("settle_run", LedgerUnavailable("reset after commit"), after=True)
    w = make_world(ledger=proxy)
    run_id = await admitted(w)
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.SETTLED
    assert proxy.calls.count("settle_run") == 2
    kinds = [s.kind for s in proxy.inner.step_log[run_id]]
    assert kinds.count("run.done") == 1 and kinds[-1] == "run.done"


def _delivery(mode: ResumeMode) -> RunDelivery:
    from datetime import UTC, datetime
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return RunDelivery(run_id=UUID(int=1), seq=0, state=DeliveryState.CLAIMED, mode=mode,
                       queue="runs", priority=50, created_at=now, updated_at=now)


def test_only_a_fresh_hop_that_never_saved_skips_the_checkpoint_deletion() -> None:
    assert not _may_hold_checkpoint(_delivery(ResumeMode.FRESH), Stasis())
    assert _may_hold_checkpoint(_delivery(ResumeMode.FRESH), Stasis(saving=True))
    assert _may_hold_checkpoint(_delivery(ResumeMode.RESUME), Stasis())
    assert _may_hold_checkpoint(None, Stasis())
