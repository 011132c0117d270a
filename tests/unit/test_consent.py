"""Consent: park order, verdicts, owner-specific re-admission and the Bridge rules.

Seed 000 ("Events, settlement, and waits") and seed 003 ("What crosses the
threshold", "Return makes a new claim"). The `consent_gate` Pattern asks
for approval, and its resumed node records the verdict it read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime import faults
from runtime.cancel import Canceller
from runtime.errors import NotFound
from runtime.keys import hop_key
from runtime.models import (
    ConsentStatus,
    DeliveryState,
    ResumeMode,
    RunStatus,
    Settlement,
)
from runtime.recovery.relay import Relays
from runtime.stasis.consent import ConsentRefused, decide
from runtime.stasis.waits import CHAIN_LIMIT, SEVERAL_APPROVALS
from runtime.worker import HopOutcome
from tests.unit.fakes import World
from tests.unit.waitkit import admit, hop, run_of, tables, wait_world

pytestmark = pytest.mark.anyio


async def parked(w: World, **content: Any) -> tuple[UUID, UUID]:
    """A consent_gate Run parked on its first consent: (run id, consent id)."""
    run_id = await admit(w, "consent_gate", **content)
    assert await hop(w, run_id) is HopOutcome.PARKED
    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None
    return run_id, consent_id


async def test_consent_identity_exists_before_the_snapshot_that_names_it() -> None:
    w = wait_world()
    seen: dict[str, Any] = {}

    def at_checkpoint() -> None:
        (record,) = tables(w).checkpoint_table.values()
        seen["bound"] = record.consent_id
        seen["snapshot"] = record.document["history"][-1]["consent_id"]
        seen["rows"] = dict(tables(w).consent_table)

    w.faults.observe(faults.CONSENT_CHECKPOINT_SAVED, at_checkpoint)
    _, consent_id = await parked(w)

    # The checkpoint already named the consent id while no row existed yet,
    # and the row created afterwards carries exactly that id.
    assert seen["rows"] == {}
    assert seen["bound"] == consent_id
    assert seen["snapshot"] == str(consent_id)
    assert list(tables(w).consent_table) == [consent_id]


async def test_consent_order_is_checkpoint_then_consent_row_then_park() -> None:
    w = wait_world(proxy=True)
    states: list[tuple[str, RunStatus, bool, bool]] = []

    def observe(name: str) -> Any:
        def fn() -> None:
            run = next(iter(tables(w).run_table.values()))
            states.append((name, run.status, bool(tables(w).checkpoint_table),
                           bool(tables(w).consent_table)))
        return fn

    for name in (faults.CONSENT_CHECKPOINT_SAVED, faults.CONSENT_ROW_SAVED):
        w.faults.observe(name, observe(name))
    run_id, _ = await parked(w)

    names = [n for n in w.faults.names() if n.startswith("consent.")]
    assert names == [faults.CONSENT_CHECKPOINT_SAVED, faults.CONSENT_ROW_SAVED]
    assert states == [
        (faults.CONSENT_CHECKPOINT_SAVED, RunStatus.RUNNING, True, False),
        (faults.CONSENT_ROW_SAVED, RunStatus.RUNNING, True, True),
    ]
    waits = [c for c in w.ledger.calls
             if c in ("save_checkpoint", "create_consent", "park_consent")]
    assert waits == ["save_checkpoint", "create_consent", "park_consent"]
    assert run_of(w, run_id).status is RunStatus.AWAITING_CONSENT


async def test_park_settles_the_claimed_delivery_and_stores_the_consent_id() -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    run = run_of(w, run_id)
    assert run.status is RunStatus.AWAITING_CONSENT
    assert run.consent_id == consent_id and run.seq == 0
    assert w.ledger.delivery_table[(run_id, 0)].state is DeliveryState.SETTLED
    consent = w.ledger.consent_table[consent_id]
    assert (consent.status, consent.run_id, consent.owner) == (
        ConsentStatus.PENDING, run_id, "alice")
    assert w.ledger.checkpoint_table[run_id].consent_id == consent_id


@pytest.mark.parametrize("approve", [True, False])
async def test_both_verdicts_resume_and_record_principal_and_time(approve: bool) -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    w.clock.advance(5)
    decided = await decide(w.engine, consent_id, approve, "alice")

    assert decided.status is (ConsentStatus.APPROVED if approve else ConsentStatus.DENIED)
    assert decided.decided_by == "alice" and decided.decided_at == w.clock.now()
    assert run_of(w, run_id).status is RunStatus.QUEUED
    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.DONE
    assert run.result == {"verdicts": [decided.status.value]}
    # Only an approval applied the gated effect.
    assert bool(w.effects.applied()) is approve


async def test_resumed_hop_reads_the_stored_verdict_not_the_enqueue_payload() -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    await decide(w.engine, consent_id, True, "alice")
    job = w.broker.inner.jobs[hop_key(run_id, 1)].info
    # The enqueue payload is only the Run id and the exact sequence.
    assert (job.run_id, job.seq) == (run_id, 1)

    # Whatever the ledger holds when the hop claims is what the Graph reads.
    stored = w.ledger.consent_table[consent_id]
    w.ledger.consent_table[consent_id] = stored.model_copy(
        update={"status": ConsentStatus.DENIED}
    )
    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert run_of(w, run_id).result == {"verdicts": ["DENIED"]}
    assert w.effects.applied() == {}


async def test_readmit_creates_next_pending_resume_delivery_in_the_same_transaction() -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    seen: list[Any] = []

    def at_readmit() -> None:
        run = w.ledger.run_table[run_id]
        seen.append((run.status, run.seq, w.ledger.delivery_table.get((run_id, 1)),
                     hop_key(run_id, 1) in w.broker.inner.jobs))

    w.faults.observe(faults.READMIT_COMMITTED, at_readmit)
    await decide(w.engine, consent_id, True, "alice")

    ((status, seq, delivery, published),) = seen
    assert (status, seq) == (RunStatus.QUEUED, 1)
    assert delivery is not None and published is False
    assert (delivery.seq, delivery.state, delivery.mode) == (
        1, DeliveryState.PENDING, ResumeMode.RESUME)
    assert delivery.queue == w.ledger.delivery_table[(run_id, 0)].queue
    # Publication then moved it on, under the new sequence's own key.
    assert w.ledger.delivery_table[(run_id, 1)].state is DeliveryState.PUBLISHED
    assert [p["key"] for p in w.broker.publishes] == [hop_key(run_id, 0), hop_key(run_id, 1)]


async def test_duplicate_verdicts_are_inert() -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    first = await decide(w.engine, consent_id, True, "alice")
    after_first = w.dump()
    again = await decide(w.engine, consent_id, True, "alice")
    assert again == first
    assert w.dump() == after_first

    # Still inert once the resumed hop has finished the Run.
    assert await hop(w, run_id) is HopOutcome.SETTLED
    done = w.dump()
    await decide(w.engine, consent_id, True, "alice")
    assert w.dump() == done
    assert len(w.broker.publishes) == 2


async def test_concurrent_verdict_handlers_converge_to_one_readmission() -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    results: list[Any] = []

    async def handler(approve: bool) -> None:
        try:
            results.append(await decide(w.engine, consent_id, approve, "alice"))
        except ConsentRefused as exc:
            results.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(handler, True)
        tg.start_soon(handler, True)

    assert len(results) == 2 and results[0] == results[1]
    assert sorted(w.ledger.delivery_table) == [(run_id, 0), (run_id, 1)]
    assert [p["seq"] for p in w.broker.publishes] == [0, 1]
    assert run_of(w, run_id).seq == 1


async def test_concurrent_opposite_verdicts_admit_exactly_one() -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    results: list[Any] = []

    async def handler(approve: bool) -> None:
        try:
            results.append(await decide(w.engine, consent_id, approve, "alice"))
        except ConsentRefused as exc:
            results.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(handler, True)
        tg.start_soon(handler, False)

    refused = [r for r in results if isinstance(r, ConsentRefused)]
    won = [r for r in results if not isinstance(r, ConsentRefused)]
    assert len(refused) == 1 and len(won) == 1
    assert "already decided" in refused[0].reason
    assert w.ledger.consent_table[consent_id].status is won[0].status
    assert sorted(w.ledger.delivery_table) == [(run_id, 0), (run_id, 1)]


async def test_a_principal_who_does_not_own_the_consent_is_refused_and_writes_nothing() -> None:
    w = wait_world()
    _, consent_id = await parked(w)
    before, publishes = w.dump(), list(w.broker.publishes)
    with pytest.raises(ConsentRefused) as info:
        await decide(w.engine, consent_id, True, "mallory")
    assert info.value.field == "consent"
    assert "mallory" in info.value.reason and "does not own" in info.value.reason
    assert str(consent_id) in str(info.value)
    assert w.dump() == before and w.broker.publishes == publishes


async def test_a_verdict_for_an_unknown_consent_is_not_found() -> None:
    w = wait_world()
    await parked(w)
    before = w.dump()
    ghost = UUID(int=0xDEAD)
    with pytest.raises(NotFound) as info:
        await decide(w.engine, ghost, True, "alice")
    assert info.value.what == "consent" and info.value.ident == ghost
    assert w.dump() == before


async def test_the_other_verdict_on_a_decided_consent_is_refused() -> None:
    w = wait_world()
    _, consent_id = await parked(w)
    await decide(w.engine, consent_id, False, "alice")
    before = w.dump()
    with pytest.raises(ConsentRefused) as info:
        await decide(w.engine, consent_id, True, "alice")
    assert info.value.reason == "already decided DENIED"
    assert w.dump() == before


async def test_a_verdict_on_a_cancelled_consent_is_refused() -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    assert (await Canceller(w.deps).cancel(run_id)).status is RunStatus.CANCELLED
    before = w.dump()
    with pytest.raises(ConsentRefused) as info:
        await decide(w.engine, consent_id, True, "alice")
    assert info.value.reason == "it was cancelled"
    assert w.dump() == before


async def test_publication_failure_after_readmit_leaves_the_queued_hop_for_the_relay() -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    w.broker.fail_publish = True
    await decide(w.engine, consent_id, True, "alice")

    run = run_of(w, run_id)
    assert (run.status, run.seq) == (RunStatus.QUEUED, 1)
    assert w.ledger.delivery_table[(run_id, 1)].state is DeliveryState.PENDING
    assert hop_key(run_id, 1) not in w.broker.inner.jobs

    w.broker.fail_publish = False
    relays = Relays(w.engine, datetime.min.replace(tzinfo=w.clock.now().tzinfo),
                    Canceller(w.deps))
    await relays.pass_once()

    assert relays.errors == 0
    assert w.ledger.delivery_table[(run_id, 1)].state is DeliveryState.PUBLISHED
    assert hop_key(run_id, 1) in w.broker.inner.jobs
    # The same exact hop: no wait recreated, no new sequence, no second consent.
    assert sorted(w.ledger.delivery_table) == [(run_id, 0), (run_id, 1)]
    assert list(w.ledger.consent_table) == [consent_id]
    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert run_of(w, run_id).status is RunStatus.DONE


async def test_generic_status_writers_cannot_move_awaiting_consent_to_queued() -> None:
    w = wait_world()
    run_id, consent_id = await parked(w)
    before = w.dump()
    now = w.clock.now()
    ledger = w.ledger

    assert await ledger.rotate_delivery(run_id, 0, now) is None
    claim = await ledger.claim_delivery(run_id, 0, "boot-1", "other", now)
    assert claim.claimed is False
    assert await ledger.settle_run(run_id, 0, Settlement(status=RunStatus.DONE), now) is None
    assert await ledger.fail_orphan(run_id, 0, "boot-9", "lost", now) is None
    assert await ledger.release_held(run_id, 0, now) == before.deliveries[0]
    assert await ledger.readmit_after_delegate(run_id, consent_id, now) is None
    # Even the owner CAS refuses while the consent is still undecided.
    assert await ledger.readmit_after_consent(run_id, consent_id, now) is None
    assert w.dump() == before
    assert run_of(w, run_id).status is RunStatus.AWAITING_CONSENT


async def test_several_approvals_in_one_response_settle_done_with_a_bottleneck() -> None:
    w = wait_world()
    run_id = await admit(w, "consent_gate", approvals=2)
    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.DONE
    assert run.result == {"bottleneck": SEVERAL_APPROVALS}
    assert w.ledger.consent_table == {}
    assert w.ledger.checkpoint_table == {}


async def test_resumed_rounds_chain_at_most_three() -> None:
    w = wait_world()
    run_id = await admit(w, "consent_gate", rounds=4)
    for round_no in range(1, 4):
        assert await hop(w, run_id) is HopOutcome.PARKED
        consent_id = run_of(w, run_id).consent_id
        assert consent_id is not None
        assert len(w.ledger.consent_table) == round_no
        await decide(w.engine, consent_id, True, "alice")

    # The fourth request in the chain is not asked: the Run ends honestly.
    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.DONE
    assert run.result == {"bottleneck": CHAIN_LIMIT}
    assert len(w.ledger.consent_table) == 3
    assert run.seq == 3


async def test_three_rounds_complete_within_the_chain_limit() -> None:
    w = wait_world()
    run_id = await admit(w, "consent_gate", rounds=3)
    for _ in range(3):
        assert await hop(w, run_id) is HopOutcome.PARKED
        consent_id = run_of(w, run_id).consent_id
        assert consent_id is not None
        await decide(w.engine, consent_id, True, "alice")
    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert run_of(w, run_id).result == {"verdicts": ["APPROVED"] * 3}
