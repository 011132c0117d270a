"""The Ledger contract for startup's recorded debts (issue 15, item 2; seed
000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"), run
against every implementation: startup reads terminal evidence, checkpoint
and late-fence debts from where they were recorded, never all terminal Runs.
"""

from __future__ import annotations

import pytest

from runtime.models import RunStatus, Settlement
from runtime.seams import Ledger
from tests.contract.ledger_records import at, make_delivery, make_run, uid
from tests.contract.test_ledger_waits_contract import checkpoint, running

pytestmark = pytest.mark.anyio

DONE = Settlement(status=RunStatus.DONE, result={"ok": True})


async def test_a_terminal_run_owes_evidence_until_its_terminal_step_lands(ledger: Ledger) -> None:
    live, done, failed = [await running(ledger, n) for n in (1, 2, 3)]
    assert await ledger.evidence_debts(None, 10) == []  # nonterminal Runs owe nothing
    done = await ledger.settle_run(done.id, 0, DONE, at(5))
    failed = await ledger.settle_run(
        failed.id, 0, Settlement(status=RunStatus.FAILED, error="x"), at(6))
    assert done is not None and failed is not None
    assert await ledger.evidence_debts(None, 10) == [done, failed]  # by (updated_at, id)
    assert await ledger.evidence_debts(None, 1) == [done]
    assert await ledger.evidence_debts((done.updated_at, done.id), 10) == [failed]
    await ledger.append_step(done.id, 0, "node.completed", {}, at(7))  # not terminal
    assert await ledger.evidence_debts(None, 10) == [done, failed]
    await ledger.append_step(done.id, 0, "run.done", {}, at(7))
    assert await ledger.evidence_debts(None, 10) == [failed]
    await ledger.append_step(live.id, 0, "run.failed", {}, at(7))  # Step before truth
    await ledger.append_steps(failed.id, 0, [("node.completed", {})], at(7))
    assert await ledger.evidence_debts(None, 10) == [failed]  # a batch without a terminal Step
    await ledger.append_steps(failed.id, 0, [("node.completed", {}), ("run.failed", {})], at(7))
    assert await ledger.evidence_debts(None, 10) == []  # the group commit pays it too
    await ledger.settle_run(live.id, 0, DONE, at(8))
    assert await ledger.evidence_debts(None, 10) == []


async def test_cancellation_records_a_late_fence_debt_until_settled(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    queued = make_run(uid(2), priority=70)
    await ledger.admit_run(queued, make_delivery(queued))
    assert await ledger.late_fence_debts(None, 10) == []
    await ledger.begin_cancel(run.id, at(3))
    assert await ledger.late_fence_debts(None, 10) == []  # CANCELLING: not yet exposed
    cancelled = await ledger.finish_cancel(run.id, 0, at(4))
    await ledger.begin_cancel(queued.id, at(5))
    other = await ledger.finish_cancel(queued.id, 0, at(6))
    assert cancelled is not None and other is not None
    assert await ledger.late_fence_debts(None, 10) == [cancelled, other]
    assert await ledger.late_fence_debts((cancelled.updated_at, cancelled.id), 1) == [other]
    assert await ledger.settle_late_fence(run.id) is True
    assert await ledger.settle_late_fence(run.id) is False  # idempotent
    assert await ledger.settle_late_fence(uid(9)) is False
    assert await ledger.finish_cancel(run.id, 0, at(7)) == cancelled  # a repeat owes nothing
    assert await ledger.late_fence_debts(None, 10) == [other]


async def test_checkpoint_debts_page_after_a_run_id(ledger: Ledger) -> None:
    runs = [await running(ledger, n) for n in (1, 2, 3)]
    for run in runs:
        await ledger.save_checkpoint(checkpoint(run.id))
        await ledger.settle_run(run.id, 0, DONE, at(5))
    ids = sorted((run.id for run in runs), key=str)
    assert await ledger.checkpoint_debts(10) == ids
    assert await ledger.checkpoint_debts(10, ids[0]) == ids[1:]
    assert await ledger.checkpoint_debts(1, ids[1]) == ids[2:]
    assert await ledger.checkpoint_debts(10, ids[2]) == []
