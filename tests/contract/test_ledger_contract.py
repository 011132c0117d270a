"""The Ledger contract: every method and rule, run against every implementation.

The rules come from seed 000_81a5c720b14d934a.txt ("Admission and exact
claim") as the Ledger protocol in runtime/seams.py states them; the memory
ledger is the reference and the PostgreSQL ledger must give the same results.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime.models import (
    DeliveryState,
    ResumeMode,
    Run,
    RunDelivery,
    RunStatus,
    Settlement,
)
from runtime.seams import Ledger
from tests.contract.ledger_records import at, make_delivery, make_run, runs_for_steps, uid

pytestmark = pytest.mark.anyio

DONE = Settlement(status=RunStatus.DONE, result={"answer": 42, "items": [1, "two"]})


async def admitted(
    ledger: Ledger,
    run: Run,
    state: DeliveryState = DeliveryState.PENDING,
    *,
    mode: ResumeMode = ResumeMode.FRESH,
    claimed_boot: str | None = None,
    claim_token: str | None = None,
    fence_session: bool = True,
) -> tuple[Run, RunDelivery]:
    delivery = make_delivery(
        run, state=state, mode=mode, claimed_boot=claimed_boot, claim_token=claim_token
    )
    admission = await ledger.admit_run(run, delivery, fence_session=fence_session)
    assert admission.created
    return admission.run, admission.delivery


async def claimed(ledger: Ledger, n: int = 1, boot: str = "boot-a") -> tuple[UUID, datetime]:
    run, _ = await admitted(ledger, make_run(uid(n)))
    claim = await ledger.claim_delivery(run.id, 0, boot, f"token-{n}", at(10))
    assert claim.claimed
    return run.id, at(10)


# -- admission ---------------------------------------------------------------


async def test_admit_records_run_and_delivery(ledger: Ledger) -> None:
    run = make_run(uid(1))
    delivery = make_delivery(run, state=DeliveryState.HELD)
    admission = await ledger.admit_run(run, delivery)
    assert admission.created is True
    assert (admission.run, admission.delivery) == (run, delivery)
    assert await ledger.get_run(run.id) == run
    assert await ledger.get_delivery(run.id, 0) == delivery
    assert await ledger.deliveries(run.id) == [delivery]


async def test_admit_same_id_returns_existing_pair_once(ledger: Ledger) -> None:
    run, _ = await admitted(ledger, make_run(uid(1)), DeliveryState.HELD)
    released = await ledger.release_held(run.id, 0, at(1))
    other = make_run(uid(1), prompt="different work", created=5)
    again = await ledger.admit_run(other, make_delivery(other))
    assert again.created is False
    assert again.run == run
    assert again.delivery == released  # the current delivery, not the one offered
    assert await ledger.deliveries(run.id) == [released]


async def test_readmitting_the_same_records_returns_them_equal(ledger: Ledger) -> None:
    """The engine's own-commit test (runtime.engine.own_commit) compares the stored
    pair with the records it offered: a retry after an ambiguous commit must read
    them back equal, and a racing admission with the other delivery must not."""
    run = make_run(uid(1))
    held = make_delivery(run, state=DeliveryState.HELD)
    await ledger.admit_run(run, held)
    again = await ledger.admit_run(run, held)
    assert again.created is False and (again.run, again.delivery) == (run, held)
    racing = await ledger.admit_run(run, make_delivery(run))
    assert racing.created is False and racing.run == run and racing.delivery == held


async def test_admit_refuses_a_delivery_of_another_generation(ledger: Ledger) -> None:
    run = make_run(uid(1))
    wrong = make_delivery(run).model_copy(update={"seq": 1})
    with pytest.raises(ValueError):
        await ledger.admit_run(run, wrong)
    assert await ledger.get_run(run.id) is None
    assert (await ledger.dump()).deliveries == []


async def test_lookups_of_unknown_records(ledger: Ledger) -> None:
    assert await ledger.get_run(uid(9)) is None
    assert await ledger.get_delivery(uid(9), 0) is None
    assert await ledger.deliveries(uid(9)) == []
    assert await ledger.steps(uid(9)) == []


# -- held generations ----------------------------------------------------------


async def test_release_held_moves_only_held_to_pending(ledger: Ledger) -> None:
    run, held = await admitted(ledger, make_run(uid(1)), DeliveryState.HELD)
    released = await ledger.release_held(run.id, 0, at(3))
    assert released == held.model_copy(
        update={"state": DeliveryState.PENDING, "held_by": None, "updated_at": at(3)}
    )
    assert await ledger.release_held(run.id, 0, at(4)) == released  # repeat: unchanged
    assert await ledger.release_held(run.id, 1, at(4)) is None
    assert await ledger.release_held(uid(9), 0, at(4)) is None


async def test_fail_held_settles_only_a_held_generation(ledger: Ledger) -> None:
    run, held = await admitted(ledger, make_run(uid(1)), DeliveryState.HELD)
    failed = await ledger.fail_held(run.id, 0, "retention failed", at(2))
    assert failed == held.model_copy(update={"state": DeliveryState.FAILED, "updated_at": at(2)})
    stored = await ledger.get_run(run.id)
    assert stored == run.model_copy(
        update={"status": RunStatus.FAILED, "error": "retention failed", "updated_at": at(2)}
    )
    assert await ledger.fail_held(run.id, 0, "again", at(3)) == failed
    assert await ledger.get_run(run.id) == stored
    assert await ledger.fail_held(uid(9), 0, "x", at(3)) is None


async def test_fail_held_leaves_an_advanced_delivery_admitted(ledger: Ledger) -> None:
    run, _ = await admitted(ledger, make_run(uid(1)), DeliveryState.HELD)
    released = await ledger.release_held(run.id, 0, at(1))
    assert await ledger.fail_held(run.id, 0, "too late", at(2)) == released
    assert await ledger.get_run(run.id) == run


async def test_mark_published_only_from_pending(ledger: Ledger) -> None:
    run, pending = await admitted(ledger, make_run(uid(1)))
    published = await ledger.mark_published(run.id, 0, at(1))
    assert published == pending.model_copy(
        update={"state": DeliveryState.PUBLISHED, "updated_at": at(1)}
    )
    assert await ledger.mark_published(run.id, 0, at(2)) == published

    held_run, held = await admitted(ledger, make_run(uid(2)), DeliveryState.HELD)
    assert await ledger.mark_published(held_run.id, 0, at(2)) == held

    claimed_id, _ = await claimed(ledger, 3)
    before = await ledger.get_delivery(claimed_id, 0)
    assert before is not None and before.state is DeliveryState.CLAIMED
    assert await ledger.mark_published(claimed_id, 0, at(20)) == before  # a later state is kept
    assert await ledger.mark_published(uid(9), 0, at(2)) is None


async def test_mark_published_is_refused_once_the_runs_cancellation_began(
    ledger: Ledger,
) -> None:
    """Seed 000 'Cancellation, mutation, and recovery': CANCELLING freezes the
    generation, so a late acknowledgement leaves the delivery PENDING (and its
    publisher fences the job); after CANCELLED the closed delivery is kept."""
    run, pending = await admitted(ledger, make_run(uid(1)))
    cancelling = await ledger.begin_cancel(run.id, at(1))
    assert cancelling is not None and cancelling.status is RunStatus.CANCELLING
    assert await ledger.mark_published(run.id, 0, at(2)) == pending
    assert await ledger.get_delivery(run.id, 0) == pending
    await ledger.finish_cancel(run.id, 0, at(3))
    closed = await ledger.get_delivery(run.id, 0)
    assert closed is not None and closed.state is DeliveryState.FAILED
    assert await ledger.mark_published(run.id, 0, at(4)) == closed


# -- exact claim -----------------------------------------------------------------


@pytest.mark.parametrize("state", [DeliveryState.PENDING, DeliveryState.PUBLISHED])
async def test_claim_moves_queued_run_and_delivery(ledger: Ledger, state: DeliveryState) -> None:
    run, delivery = await admitted(ledger, make_run(uid(1)), state)
    claim = await ledger.claim_delivery(run.id, 0, "boot-a", "tok", at(5))
    assert claim.claimed is True
    assert claim.run == run.model_copy(
        update={"status": RunStatus.RUNNING, "started_at": at(5), "updated_at": at(5)}
    )
    assert claim.delivery == delivery.model_copy(
        update={
            "state": DeliveryState.CLAIMED,
            "claimed_boot": "boot-a",
            "claim_token": "tok",
            "updated_at": at(5),
        }
    )
    assert await ledger.get_run(run.id) == claim.run
    assert await ledger.get_delivery(run.id, 0) == claim.delivery


async def test_claim_refuses_held_and_closed_deliveries(ledger: Ledger) -> None:
    run, held = await admitted(ledger, make_run(uid(1)), DeliveryState.HELD)
    claim = await ledger.claim_delivery(run.id, 0, "boot-a", "tok", at(5))
    assert (claim.claimed, claim.run, claim.delivery) == (False, run, held)

    run2, _ = await admitted(ledger, make_run(uid(2)), DeliveryState.HELD)
    failed = await ledger.fail_held(run2.id, 0, "x", at(1))
    claim = await ledger.claim_delivery(run2.id, 0, "boot-a", "tok", at(5))
    assert claim.claimed is False and claim.delivery == failed
    assert claim.run is not None and claim.run.status is RunStatus.FAILED


async def test_claim_of_a_stale_sequence_is_refused(ledger: Ledger) -> None:
    run, _ = await admitted(ledger, make_run(uid(1)))
    rotated = await ledger.rotate_delivery(run.id, 0, at(1))
    assert rotated is not None
    stale = await ledger.claim_delivery(run.id, 0, "boot-a", "tok", at(2))
    assert stale.claimed is False
    assert stale.delivery is not None and stale.delivery.state is DeliveryState.FAILED
    future = await ledger.claim_delivery(run.id, 7, "boot-a", "tok", at(2))
    assert (future.claimed, future.delivery) == (False, None)
    assert future.run is not None and future.run.seq == 1
    fresh = await ledger.claim_delivery(run.id, 1, "boot-a", "tok", at(3))
    assert fresh.claimed is True
    unknown = await ledger.claim_delivery(uid(9), 0, "boot-a", "tok", at(2))
    assert (unknown.claimed, unknown.run, unknown.delivery) == (False, None, None)


async def test_claim_is_idempotent_for_its_own_token_only(ledger: Ledger) -> None:
    run_id, _ = await claimed(ledger, 1)
    first_run, first_delivery = await ledger.get_run(run_id), await ledger.get_delivery(run_id, 0)
    repeat = await ledger.claim_delivery(run_id, 0, "boot-a", "token-1", at(30))
    assert (repeat.claimed, repeat.run, repeat.delivery) == (True, first_run, first_delivery)
    other = await ledger.claim_delivery(run_id, 0, "boot-b", "token-other", at(30))
    assert (other.claimed, other.run, other.delivery) == (False, first_run, first_delivery)


async def test_started_at_is_kept_from_the_first_claim(ledger: Ledger) -> None:
    # A resume hop: the Run already started on an earlier sequence.
    run, _ = await admitted(ledger, make_run(uid(1), seq=3, started=1, created=0, updated=2))
    claim = await ledger.claim_delivery(run.id, 3, "boot-b", "tok", at(50))
    assert claim.claimed and claim.run is not None
    assert claim.run.started_at == at(1)
    assert claim.run.updated_at == at(50)


async def test_claim_refuses_a_run_that_is_not_queued(ledger: Ledger) -> None:
    run, _ = await admitted(ledger, make_run(uid(1), status=RunStatus.DONE))
    claim = await ledger.claim_delivery(run.id, 0, "boot-a", "tok", at(1))
    assert claim.claimed is False and claim.run == run


async def test_concurrent_claims_have_exactly_one_winner(ledger: Ledger) -> None:
    run, _ = await admitted(ledger, make_run(uid(1)))
    results: dict[str, bool] = {}

    async def claim(token: str) -> None:
        results[token] = (await ledger.claim_delivery(run.id, 0, "boot", token, at(1))).claimed

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(claim, f"tok-{i}")
    winners = [t for t, won in results.items() if won]
    assert len(winners) == 1
    stored = await ledger.get_delivery(run.id, 0)
    assert stored is not None and stored.claim_token == winners[0]


# -- settlement ------------------------------------------------------------------


async def test_settle_commits_terminal_truth_of_the_claimed_sequence(ledger: Ledger) -> None:
    run_id, _ = await claimed(ledger)
    before = await ledger.get_run(run_id)
    assert before is not None
    settled = await ledger.settle_run(run_id, 0, DONE, at(20))
    assert settled == before.model_copy(
        update={"status": RunStatus.DONE, "result": DONE.result, "updated_at": at(20)}
    )
    assert await ledger.get_run(run_id) == settled
    delivery = await ledger.get_delivery(run_id, 0)
    assert delivery is not None
    assert (delivery.state, delivery.updated_at) == (DeliveryState.SETTLED, at(20))


async def test_settle_repeat_is_accepted_only_when_identical(ledger: Ledger) -> None:
    run_id, _ = await claimed(ledger)
    settled = await ledger.settle_run(run_id, 0, DONE, at(20))
    assert await ledger.settle_run(run_id, 0, DONE, at(21)) == settled  # unchanged
    other_result = Settlement(status=RunStatus.DONE, result={"answer": 0})
    assert await ledger.settle_run(run_id, 0, other_result, at(22)) is None
    failed = Settlement(status=RunStatus.FAILED, error="boom")
    assert await ledger.settle_run(run_id, 0, failed, at(22)) is None
    assert await ledger.get_run(run_id) == settled


async def test_settle_is_fenced_by_the_claimed_sequence(ledger: Ledger) -> None:
    run_id, _ = await claimed(ledger)
    assert await ledger.settle_run(run_id, 1, DONE, at(20)) is None
    assert await ledger.settle_run(uid(9), 0, DONE, at(20)) is None
    unclaimed, _ = await admitted(ledger, make_run(uid(2)))
    assert await ledger.settle_run(unclaimed.id, 0, DONE, at(20)) is None
    assert await ledger.get_run(unclaimed.id) == unclaimed
    rotated_run, _ = await admitted(ledger, make_run(uid(3)))
    await ledger.rotate_delivery(rotated_run.id, 0, at(1))
    assert await ledger.settle_run(rotated_run.id, 0, DONE, at(20)) is None


async def test_settle_failure_records_error_and_no_result(ledger: Ledger) -> None:
    run_id, _ = await claimed(ledger)
    failed = await ledger.settle_run(
        run_id, 0, Settlement(status=RunStatus.FAILED, error="node raised"), at(20)
    )
    assert failed is not None
    assert (failed.status, failed.result, failed.error) == (RunStatus.FAILED, None, "node raised")


# -- rotation and orphans --------------------------------------------------------


@pytest.mark.parametrize("mode", [ResumeMode.FRESH, ResumeMode.RESUME])
async def test_rotate_closes_dead_delivery_and_opens_next(ledger: Ledger, mode: ResumeMode) -> None:
    run, old = await admitted(ledger, make_run(uid(1)), DeliveryState.PUBLISHED, mode=mode)
    fresh = await ledger.rotate_delivery(run.id, 0, at(7))
    assert fresh == old.model_copy(
        update={
            "seq": 1,
            "state": DeliveryState.PENDING,
            "created_at": at(7),
            "updated_at": at(7),
        }
    )
    assert fresh is not None and fresh.mode is mode
    assert await ledger.get_run(run.id) == run.model_copy(update={"seq": 1, "updated_at": at(7)})
    assert [(d.seq, d.state) for d in await ledger.deliveries(run.id)] == [
        (0, DeliveryState.FAILED),
        (1, DeliveryState.PENDING),
    ]
    assert await ledger.rotate_delivery(run.id, 0, at(8)) is None  # no longer current


async def test_rotate_refuses_held_claimed_and_unknown(ledger: Ledger) -> None:
    held_run, _ = await admitted(ledger, make_run(uid(1)), DeliveryState.HELD)
    assert await ledger.rotate_delivery(held_run.id, 0, at(1)) is None
    claimed_id, _ = await claimed(ledger, 2)
    assert await ledger.rotate_delivery(claimed_id, 0, at(11)) is None
    assert await ledger.rotate_delivery(uid(9), 0, at(1)) is None
    assert await ledger.get_run(held_run.id) == held_run


def _fail_orphan(ledger: Ledger, run_id: UUID, reason: str, now: datetime) -> Any:
    """Recovery on boot-new fails a Run that boot-old claimed."""
    return ledger.fail_orphan(run_id, 0, "boot-new", reason, now)


def _fail_abandoned(ledger: Ledger, run_id: UUID, reason: str, now: datetime) -> Any:
    """boot-a fails its own exact claim t-1, whose job ended unsettled."""
    return ledger.fail_abandoned(run_id, 0, "t-1", reason, now)


@pytest.mark.parametrize("status", [RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE])
@pytest.mark.parametrize(
    ("fail", "claimed_boot", "claim_token"),
    [(_fail_orphan, "boot-old", "t"), (_fail_abandoned, "boot-a", "t-1")],
    ids=["orphan", "abandoned"],
)
async def test_fail_open_run_fails_the_run_and_its_delivery_once(
    ledger: Ledger, status: RunStatus, fail: Any, claimed_boot: str, claim_token: str
) -> None:
    run = make_run(uid(1), status=status, started=1)
    _, delivery = await admitted(
        ledger, run, DeliveryState.CLAIMED, claimed_boot=claimed_boot, claim_token=claim_token
    )
    failed = await fail(ledger, run.id, "lost", at(9))
    assert failed == run.model_copy(
        update={"status": RunStatus.FAILED, "error": "lost", "updated_at": at(9)}
    )
    assert await ledger.get_delivery(run.id, 0) == delivery.model_copy(
        update={"state": DeliveryState.FAILED, "updated_at": at(9)}
    )
    # The same failure repeated (an ambiguous commit) reports it again; another reason does not.
    assert await fail(ledger, run.id, "lost", at(10)) == failed
    assert await fail(ledger, run.id, "other", at(10)) is None
    if fail is _fail_abandoned:
        assert await ledger.fail_abandoned(run.id, 0, "t-2", "lost", at(10)) is None


async def test_fail_orphan_spares_the_current_boot_and_other_states(ledger: Ledger) -> None:
    run_id, _ = await claimed(ledger, 1, boot="boot-a")
    assert await ledger.fail_orphan(run_id, 0, "boot-a", "orphan", at(20)) is None
    assert await ledger.fail_orphan(run_id, 1, "boot-b", "orphan", at(20)) is None
    stored = await ledger.get_run(run_id)
    assert stored is not None and stored.status is RunStatus.RUNNING
    queued, _ = await admitted(ledger, make_run(uid(2)))
    assert await ledger.fail_orphan(queued.id, 0, "boot-b", "orphan", at(20)) is None
    assert await ledger.fail_orphan(uid(9), 0, "boot-b", "orphan", at(20)) is None


async def test_fail_abandoned_is_fenced_by_token_sequence_and_state(ledger: Ledger) -> None:
    run_id, _ = await claimed(ledger, 1, boot="boot-a")  # claim token "token-1"
    assert await ledger.fail_abandoned(run_id, 0, "token-9", "gone", at(20)) is None
    assert await ledger.fail_abandoned(run_id, 1, "token-1", "gone", at(20)) is None
    stored = await ledger.get_run(run_id)
    assert stored is not None and stored.status is RunStatus.RUNNING
    # A Run gone CANCELLING (the operator won the race) is not failed under it.
    assert await ledger.begin_cancel(run_id, at(21)) is not None
    assert await ledger.fail_abandoned(run_id, 0, "token-1", "gone", at(22)) is None
    stored = await ledger.get_run(run_id)
    assert stored is not None and stored.status is RunStatus.CANCELLING
    settled_id, _ = await claimed(ledger, 2)
    assert await ledger.settle_run(settled_id, 0, DONE, at(23)) is not None
    assert await ledger.fail_abandoned(settled_id, 0, "token-2", "gone", at(24)) is None
    queued, _ = await admitted(ledger, make_run(uid(3)))
    assert await ledger.fail_abandoned(queued.id, 0, "token-3", "gone", at(20)) is None
    assert await ledger.fail_abandoned(uid(9), 0, "token-1", "gone", at(20)) is None


# -- queries -----------------------------------------------------------------------


async def test_runs_in_session_lists_bounded_nonterminal_runs(ledger: Ledger) -> None:
    # Several open Runs in one session: a state only an unfenced admission makes.
    await admitted(ledger, make_run(uid(5), session="s", created=3), fence_session=False)
    await admitted(ledger, make_run(uid(4), session="s", created=1), fence_session=False)
    await admitted(ledger, make_run(uid(3), session="s", created=1), fence_session=False)
    await admitted(ledger, make_run(uid(2), session="s", created=0, status=RunStatus.DONE),
                   fence_session=False)
    await admitted(ledger, make_run(uid(1), session="other", created=0))
    await admitted(ledger, make_run(uid(6), created=0))
    found = await ledger.runs_in_session("s", 10)
    assert [r.id for r in found] == [uid(3), uid(4), uid(5)]
    refused = await ledger.admit_run(make_run(uid(7), session="s", created=0),
                                     make_delivery(make_run(uid(7), session="s")))
    assert not refused.created and refused.busy == found[0]  # the first open one
    assert [r.id for r in await ledger.runs_in_session("s", 2)] == [uid(3), uid(4)]
    assert await ledger.runs_in_session("s", 0) == []
    assert await ledger.runs_in_session("nobody", 10) == []


async def test_page_runs_orders_by_updated_at_then_id_after_the_cursor(ledger: Ledger) -> None:
    specs = [  # (n, updated, status)
        (1, 5, RunStatus.QUEUED),
        (2, 1, RunStatus.QUEUED),
        (3, 5, RunStatus.RUNNING),
        (4, 3, RunStatus.DONE),
        (5, 1, RunStatus.RUNNING),
        (6, 9, RunStatus.QUEUED),
    ]
    for n, updated, status in specs:
        await admitted(ledger, make_run(uid(n), created=0, updated=updated, status=status))
    live = [RunStatus.QUEUED, RunStatus.RUNNING]
    everything = await ledger.page_runs(live, None, 100)
    assert [r.id for r in everything] == [uid(2), uid(5), uid(1), uid(3), uid(6)]

    pages: list[list[UUID]] = []
    cursor: tuple[datetime, UUID] | None = None
    while True:
        page = await ledger.page_runs(live, cursor, 2)
        if not page:
            break
        pages.append([r.id for r in page])
        cursor = (page[-1].updated_at, page[-1].id)
    assert pages == [[uid(2), uid(5)], [uid(1), uid(3)], [uid(6)]]

    assert [r.id for r in await ledger.page_runs([RunStatus.DONE], None, 10)] == [uid(4)]
    assert await ledger.page_runs([], None, 10) == []
    assert await ledger.page_runs(live, (at(9), uid(6)), 10) == []
    after_tie = await ledger.page_runs(live, (at(5), uid(1)), 10)
    assert [r.id for r in after_tie] == [uid(3), uid(6)]


async def test_steps_are_indexed_per_run_in_append_order(ledger: Ledger) -> None:
    a, b = await runs_for_steps(ledger, 1, 2)
    s0 = await ledger.append_step(a, 0, "node.start", {"node": "first"}, at(1))
    await ledger.append_step(b, 0, "node.start", {}, at(2))
    s1 = await ledger.append_step(a, 1, "node.end", {"ok": True, "n": [1, 2]}, at(3))
    assert (s0.index, s0.seq, s0.kind, s0.data, s0.created_at) == (
        0,
        0,
        "node.start",
        {"node": "first"},
        at(1),
    )
    assert await ledger.steps(a) == [s0, s1]
    assert [s.index for s in await ledger.steps(b)] == [0]


async def test_a_step_for_a_run_never_admitted_is_refused(ledger: Ledger) -> None:
    """A Step names an admitted Run: both forms of append refuse an unknown Run
    with LookupError and write nothing, so a Run admitted later under that id
    starts with an empty log (and, on PostgreSQL, no terminal-Step flag out of
    step with it: the ledger differential found the two adapters disagreeing on
    the evidence debt of such a Run)."""
    with pytest.raises(LookupError):
        await ledger.append_step(uid(7), 0, "run.done", {}, at(1))
    with pytest.raises(LookupError):
        await ledger.append_steps(uid(7), 0, [("node.completed", {}), ("run.done", {})], at(2))
    assert await ledger.steps(uid(7)) == []
    (run_id,) = await runs_for_steps(ledger, 7)
    assert await ledger.steps(run_id) == []
    assert [r.id for r in await ledger.evidence_debts(None, 10)] == []


async def test_concurrent_step_appends_get_distinct_indexes(ledger: Ledger) -> None:
    await runs_for_steps(ledger, 1)
    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(ledger.append_step, uid(1), 0, f"k{i}", {"i": i}, at(i))
    steps = await ledger.steps(uid(1))
    assert [s.index for s in steps] == list(range(10))
    assert sorted(s.data["i"] for s in steps) == list(range(10))


async def test_append_steps_writes_a_group_in_order_after_the_run_s_steps(
    ledger: Ledger,
) -> None:
    """The Step writer's group commit (seed 000 "Events, settlement, and waits")."""
    (a,) = await runs_for_steps(ledger, 1)
    first = await ledger.append_step(a, 0, "run.claimed", {"seq": 0}, at(1))
    group = await ledger.append_steps(
        a, 0, [("node.started", {"node": "n"}), ("node.completed", {"n": [1, 2]})], at(2)
    )
    assert [(s.index, s.seq, s.kind, s.data, s.created_at) for s in group] == [
        (1, 0, "node.started", {"node": "n"}, at(2)),
        (2, 0, "node.completed", {"n": [1, 2]}, at(2)),
    ]
    assert await ledger.append_steps(a, 0, [], at(3)) == []  # nothing to write
    last = await ledger.append_step(a, 0, "run.done", {}, at(4))
    assert await ledger.steps(a) == [first, *group, last]
    assert await ledger.steps(uid(2)) == []


async def test_concurrent_groups_and_appends_get_distinct_consecutive_indexes(
    ledger: Ledger,
) -> None:
    async def group(i: int) -> None:
        await ledger.append_steps(uid(1), 0, [(f"g{i}", {"i": i}), (f"g{i}", {"i": i})], at(i))

    await runs_for_steps(ledger, 1)
    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(group, i)
            tg.start_soon(ledger.append_step, uid(1), 0, f"k{i}", {"i": i}, at(i))
    steps = await ledger.steps(uid(1))
    assert [s.index for s in steps] == list(range(18))
    for i in range(6):  # each group landed whole and contiguous
        at_ = [s.index for s in steps if s.kind == f"g{i}"]
        assert len(at_) == 2 and at_[1] == at_[0] + 1


async def test_concurrent_admissions_of_one_id_create_once(ledger: Ledger) -> None:
    created: list[bool] = []

    async def admit(prompt: str) -> None:
        run = make_run(uid(1), prompt=prompt)
        created.append((await ledger.admit_run(run, make_delivery(run))).created)

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(admit, f"p{i}")
    assert sorted(created) == [False] * 5 + [True]
    assert len((await ledger.dump()).runs) == 1


async def test_dump_orders_every_record_canonically(ledger: Ledger) -> None:
    await admitted(ledger, make_run(uid(3), created=1))
    await admitted(ledger, make_run(uid(2), created=1))
    await admitted(ledger, make_run(uid(1), created=2))
    await ledger.rotate_delivery(uid(3), 0, at(4))
    await ledger.append_step(uid(3), 0, "b", {}, at(5))
    await ledger.append_step(uid(1), 0, "a", {}, at(6))
    await ledger.append_step(uid(3), 1, "c", {}, at(7))
    dump = await ledger.dump()
    assert [r.id for r in dump.runs] == [uid(2), uid(3), uid(1)]
    assert [(d.run_id, d.seq) for d in dump.deliveries] == [
        (uid(1), 0),
        (uid(2), 0),
        (uid(3), 0),
        (uid(3), 1),
    ]
    assert [(s.run_id, s.index, s.kind) for s in dump.steps] == [
        (uid(1), 0, "a"),
        (uid(3), 0, "b"),
        (uid(3), 1, "c"),
    ]
    assert dump.runs[1] == await ledger.get_run(uid(3))


async def test_admission_fences_a_busy_session_in_its_own_transaction(ledger: Ledger) -> None:
    """The session fence is the ledger's (issue 15, M11): a second open Run of a
    session is refused with nothing written, the admitted id itself is still
    replayed, and a terminal Run frees the session."""
    first, _ = await admitted(ledger, make_run(uid(1), session="s", created=1))
    before = await ledger.dump()
    second = make_run(uid(2), session="s", created=2)
    refused = await ledger.admit_run(second, make_delivery(second))
    assert (refused.created, refused.busy, refused.run) == (False, first, second)
    assert await ledger.dump() == before
    replay = await ledger.admit_run(first, make_delivery(first))
    assert (replay.created, replay.busy, replay.run) == (False, None, first)
    other = make_run(uid(3), session="t", created=2)
    assert (await ledger.admit_run(other, make_delivery(other))).created
    await admitted(ledger, make_run(uid(4), session="u", status=RunStatus.DONE))
    after = make_run(uid(5), session="u", created=3)
    assert (await ledger.admit_run(after, make_delivery(after))).created  # DONE frees it
    with pytest.raises(ValueError):
        await ledger.admit_run(second, make_delivery(make_run(uid(9), session="s")))
