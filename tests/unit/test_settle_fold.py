"""A hop's cost in ledger transactions (issue 17, M14): the terminal Step rides in
settle_run's transaction when the Step writer is idle, and a fresh hop that never
checkpointed skips the checkpoint deletion. Neither may change what is durable:
the same Steps in the same order, the same truth, and a Step failure still
never touches truth (the hop then settles alone and owes its terminal Step)."""

from __future__ import annotations

from uuid import UUID

import pytest

from runtime.adapters.memory import MemoryLedger
from runtime.errors import LedgerUnavailable
from runtime.hop import Stasis
from runtime.models import DeliveryState, Intent, ResumeMode, RunDelivery, RunStatus
from runtime.worker import HopOutcome, _may_hold_checkpoint
from tests.unit.fakes import LedgerProxy, World, make_world

pytestmark = pytest.mark.anyio


async def admitted(w: World) -> UUID:
    return (await w.engine.submit(Intent(pattern="echo"))).run.id


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
    steps = proxy.inner.step_log[run_id]
    assert [s.kind for s in steps][-1] == "run.done" and steps[0].kind == "run.claimed"
    assert [s.index for s in steps] == list(range(len(steps)))
    assert steps[-1].data == {"error": None}
    assert proxy.inner.run_table[run_id].status is RunStatus.DONE
    assert await proxy.inner.evidence_debts(None, 10) == []
    assert run_id not in w.worker.evidence_debt


async def test_a_failed_earlier_step_makes_the_hop_settle_alone_and_owe() -> None:
    proxy = LedgerProxy(MemoryLedger())
    proxy.fail_once("append_steps", LedgerUnavailable("lost before commit"), after=False)
    proxy.fail_once("append_step", LedgerUnavailable("lost before commit"), after=False)
    w = make_world(ledger=proxy)
    run_id = await admitted(w)
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
