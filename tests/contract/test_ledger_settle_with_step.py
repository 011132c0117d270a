"""The Ledger contract: settle_run may write the Run's terminal Step in its own
transaction (issue 17, M14), run against every implementation.

A hop whose Step writer is idle hands its terminal Step to `settle_run`, so
terminal truth and its evidence commit together: one write transaction
fewer per Run, and no crash window between the two. The Step is written
only inside a settlement that applies (or its identical repeat), never by a
fenced one; it takes the Run's next index and the settled sequence; a Run
that has a terminal Step already keeps that one (one terminal Step per Run,
whoever writes it); and a Run settled with its Step owes no evidence.
"""

from __future__ import annotations

import pytest

from runtime.models import RunStatus, Settlement
from runtime.seams import Ledger
from tests.contract.ledger_records import at, make_delivery, make_run, uid
from tests.contract.test_ledger_waits_contract import running

pytestmark = pytest.mark.anyio

DONE = Settlement(status=RunStatus.DONE, result={"ok": True})
DONE_STEP = ("run.done", {"error": None})


async def test_settlement_writes_its_terminal_step_after_the_hops_steps(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    await ledger.append_steps(run.id, 0, [("run.claimed", {"seq": 0}),
                                          ("node.started", {"node": "a"})], at(4))
    settled = await ledger.settle_run(run.id, 0, DONE, at(5), DONE_STEP)
    assert settled is not None and settled.status is RunStatus.DONE
    steps = await ledger.steps(run.id)
    assert [(s.index, s.seq, s.kind, s.data) for s in steps] == [
        (0, 0, "run.claimed", {"seq": 0}), (1, 0, "node.started", {"node": "a"}),
        (2, 0, "run.done", {"error": None})]
    assert steps[-1].created_at == at(5)
    assert await ledger.evidence_debts(None, 10) == []  # paid in the settlement itself
    # The log is closed behind it, as behind any terminal Step.
    late = await ledger.append_step(run.id, 0, "node.completed", {}, at(6))
    assert late == steps[-1]


async def test_a_fenced_settlement_writes_no_step(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    assert await ledger.settle_run(run.id, 1, DONE, at(5), DONE_STEP) is None  # wrong seq
    assert await ledger.settle_run(uid(9), 0, DONE, at(5), DONE_STEP) is None  # no Run
    unclaimed = make_run(uid(2))
    await ledger.admit_run(unclaimed, make_delivery(unclaimed))
    assert await ledger.settle_run(unclaimed.id, 0, DONE, at(5), DONE_STEP) is None
    assert await ledger.steps(run.id) == [] and await ledger.steps(unclaimed.id) == []
    assert await ledger.steps(uid(9)) == []
    assert await ledger.settle_run(run.id, 0, DONE, at(6), DONE_STEP) is not None
    other = Settlement(status=RunStatus.FAILED, error="late")
    assert await ledger.settle_run(run.id, 0, other, at(7), ("run.failed", {"error": "late"})) \
        is None  # settled already, differently: fenced, and nothing written
    assert [s.kind for s in await ledger.steps(run.id)] == ["run.done"]


async def test_a_repeated_settlement_writes_its_step_once(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    first = await ledger.settle_run(run.id, 0, DONE, at(5), DONE_STEP)
    again = await ledger.settle_run(run.id, 0, DONE, at(6), DONE_STEP)  # an ambiguous commit
    assert first is not None and again == first
    assert [(s.kind, s.created_at) for s in await ledger.steps(run.id)] == [("run.done", at(5))]


async def test_a_repeat_writes_the_step_a_first_settlement_left_owed(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    assert await ledger.settle_run(run.id, 0, DONE, at(5)) is not None  # settled alone
    assert [r.id for r in await ledger.evidence_debts(None, 10)] == [run.id]
    assert await ledger.settle_run(run.id, 0, DONE, at(6), DONE_STEP) is not None
    assert [s.kind for s in await ledger.steps(run.id)] == ["run.done"]
    assert await ledger.evidence_debts(None, 10) == []


async def test_an_existing_terminal_step_stands(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    await ledger.append_step(run.id, 0, "run.failed", {"error": "early"}, at(4))
    settled = await ledger.settle_run(run.id, 0, DONE, at(5), DONE_STEP)
    assert settled is not None and settled.status is RunStatus.DONE  # truth is not refused
    assert [(s.kind, s.data) for s in await ledger.steps(run.id)] == [
        ("run.failed", {"error": "early"})]
    assert await ledger.evidence_debts(None, 10) == []


async def test_only_a_terminal_kind_rides_in_a_settlement(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    with pytest.raises(ValueError):
        await ledger.settle_run(run.id, 0, DONE, at(5), ("node.completed", {}))
    assert (await ledger.get_run(run.id)).status is RunStatus.RUNNING  # type: ignore[union-attr]
    assert await ledger.steps(run.id) == []


LIFECYCLE = [("node.started", {"node": "b"}), ("node.completed", {"node": "b"})]


async def test_lifecycle_steps_ride_ahead_of_the_terminal_one(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    await ledger.append_steps(run.id, 0, [("run.claimed", {"seq": 0})], at(4))
    settled = await ledger.settle_run(run.id, 0, DONE, at(5), DONE_STEP, LIFECYCLE)
    assert settled is not None and settled.status is RunStatus.DONE
    assert [(s.index, s.seq, s.kind, s.data, s.created_at)
            for s in await ledger.steps(run.id)] == [
        (0, 0, "run.claimed", {"seq": 0}, at(4)),
        (1, 0, "node.started", {"node": "b"}, at(5)),
        (2, 0, "node.completed", {"node": "b"}, at(5)),
        (3, 0, "run.done", {"error": None}, at(5))]
    assert await ledger.evidence_debts(None, 10) == []


async def test_lifecycle_steps_are_all_or_none_with_the_settlement(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    assert await ledger.settle_run(run.id, 1, DONE, at(5), DONE_STEP, LIFECYCLE) is None  # fenced
    assert await ledger.steps(run.id) == []
    first = await ledger.settle_run(run.id, 0, DONE, at(6), DONE_STEP, LIFECYCLE)
    again = await ledger.settle_run(run.id, 0, DONE, at(7), DONE_STEP, LIFECYCLE)  # ambiguous
    assert first is not None and again == first
    assert [(s.kind, s.created_at) for s in await ledger.steps(run.id)] == [
        ("node.started", at(6)), ("node.completed", at(6)), ("run.done", at(6))]


async def test_a_closed_log_takes_no_lifecycle_steps_either(ledger: Ledger) -> None:
    run = await running(ledger, 1)
    await ledger.append_step(run.id, 0, "run.failed", {"error": "early"}, at(4))
    assert await ledger.settle_run(run.id, 0, DONE, at(5), DONE_STEP, LIFECYCLE) is not None
    assert [s.kind for s in await ledger.steps(run.id)] == ["run.failed"]


async def test_lifecycle_steps_are_refused_without_a_terminal_step_or_as_one(
    ledger: Ledger,
) -> None:
    run = await running(ledger, 1)
    with pytest.raises(ValueError):
        await ledger.settle_run(run.id, 0, DONE, at(5), None, LIFECYCLE)
    with pytest.raises(ValueError):
        await ledger.settle_run(run.id, 0, DONE, at(5), DONE_STEP, [("run.failed", {})])
    assert (await ledger.get_run(run.id)).status is RunStatus.RUNNING  # type: ignore[union-attr]
    assert await ledger.steps(run.id) == []
