"""Seed 000 conformance (issue M12): pre-park windows, re-read cancellation and
terminal evidence, on the memory and the PostgreSQL ledger alike.

- "Events, settlement, and waits" / "Cancellation, mutation, and recovery":
  startup parks a checkpoint-plus-owner window only when the first resumable
  node snapshot binds the SAME Run id and exactly that owner.
- "Cancellation, mutation, and recovery": re-reading an already CANCELLED Run
  repeats the sweep and then repairs its missing terminal Step itself.
- "Events, settlement, and waits": one terminal Step per Run, whoever writes
  it (a hop's Step writer still attached while the canceller writes it), and
  still owed when the hop is cancelled between terminal truth and its Step.
"""

from __future__ import annotations

import dataclasses
from uuid import UUID, uuid5

import anyio
import pytest

from runtime import faults
from runtime.cancel import Canceller
from runtime.engine import RunEngine
from runtime.errors import LedgerUnavailable
from runtime.events.bus import EventBus
from runtime.events.hop import HopEvents
from runtime.models import ConsentStatus, Intent, Run, RunStatus
from runtime.recovery.orphans import LOST, OrphanVerdict
from runtime.recovery.reconcile import reconcile_runs
from runtime.seams import Deps, Ledger
from runtime.worker import HopOutcome, Worker
from tests.unit.fakes import LedgerProxy, World, make_world, settle_alone
from tests.unit.waitkit import Crash, FakeAgents, crashed

pytestmark = pytest.mark.anyio

TERMINAL = {"run.done", "run.failed", "run.cancelled"}


def world_on(ledger: Ledger, agents: FakeAgents | None = None, boot_id: str = "boot-1"
             ) -> World:
    w = make_world(ledger=ledger, boot_id=boot_id)  # type: ignore[arg-type]
    return with_deps(w, dataclasses.replace(w.deps, agents=agents))


def with_deps(w: World, deps: Deps) -> World:
    return dataclasses.replace(w, deps=deps, engine=RunEngine(deps, w.registry),
                               worker=Worker(deps, w.registry))


def rebooted(w: World) -> World:
    """The next process incarnation over the same ledger and broker."""
    w.clock.advance(1)
    return with_deps(w, dataclasses.replace(w.deps, boot_id="boot-2"))


async def admit(w: World, pattern: str) -> UUID:
    sub = await w.engine.submit(Intent(pattern=pattern, sigil="alice", content={}))
    return sub.run.id


async def run_of(w: World, run_id: UUID) -> Run:
    run = await w.ledger.get_run(run_id)
    assert run is not None
    return run


async def terminal_steps(w: World, run_id: UUID) -> list[str]:
    return [s.kind for s in await w.ledger.steps(run_id) if s.kind in TERMINAL]


async def misbind(w: World, run_id: UUID) -> None:
    """The checkpoint's first pending snapshot names another Run; its owner
    binding (consent or agent job) stays exactly the one the record names."""
    record = await w.ledger.load_checkpoint(run_id)
    assert record is not None
    document = dict(record.document)
    history = [dict(s) for s in document["history"]]
    first = next(i for i, s in enumerate(history) if s.get("status") == "pending")
    history[first]["run_id"] = str(uuid5(run_id, "another run"))
    document["history"] = history
    assert await w.ledger.save_checkpoint(record.model_copy(update={"document": document}))


async def crash_in_window(w: World, point: str, pattern: str) -> UUID:
    w.faults.raise_at(point, Crash())
    run_id = await admit(w, pattern)
    assert await w.broker.inner.dequeue("runs") is not None
    try:
        await w.worker.perform_run(run_id, 0)
    except BaseException as exc:
        if not crashed(exc):
            raise
        return run_id
    raise AssertionError("the hop was expected to crash")


# -- pre-park windows bind the same Run ---------------------------------------------


async def test_seed000_prepark_consent_window_needs_a_snapshot_of_the_same_run(
    ledger: Ledger,
) -> None:
    w = world_on(ledger)
    run_id = await crash_in_window(w, faults.CONSENT_ROW_SAVED, "consent_gate")
    (consent,) = await w.ledger.consents_of(run_id)
    await misbind(w, run_id)

    w2 = rebooted(w)
    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert report.orphans == {OrphanVerdict.FAILED_LOST: [run_id]}
    run = await run_of(w2, run_id)
    assert (run.status, run.error, run.consent_id) == (RunStatus.FAILED, LOST, None)
    # Nobody is asked for a pointless verdict: the consent was swept.
    (after,) = await w2.ledger.consents_of(run_id)
    assert (after.id, after.status) == (consent.id, ConsentStatus.CANCELLED)


async def test_seed000_prepark_consent_window_of_the_same_run_still_parks(
    ledger: Ledger,
) -> None:
    w = world_on(ledger)
    run_id = await crash_in_window(w, faults.CONSENT_ROW_SAVED, "consent_gate")
    (consent,) = await w.ledger.consents_of(run_id)

    w2 = rebooted(w)
    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert report.orphans == {OrphanVerdict.PARKED_CONSENT: [run_id]}
    run = await run_of(w2, run_id)
    assert (run.status, run.consent_id) == (RunStatus.AWAITING_CONSENT, consent.id)


async def test_seed000_prepark_delegate_window_needs_a_snapshot_of_the_same_run(
    ledger: Ledger,
) -> None:
    agents = FakeAgents()
    w = world_on(ledger, agents)
    run_id = await crash_in_window(w, faults.DELEGATE_SUBMITTED, "delegate")
    await misbind(w, run_id)

    w2 = rebooted(w)
    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert report.orphans == {OrphanVerdict.FAILED_LOST: [run_id]}
    assert (await run_of(w2, run_id)).status is RunStatus.FAILED
    assert agents.cancels == agents.submitted  # the child was contained first


# -- a re-read of a CANCELLED Run repairs its evidence --------------------------------


async def test_seed000_reread_of_a_cancelled_run_repairs_its_missing_terminal_step(
    ledger: Ledger,
) -> None:
    proxy = LedgerProxy(ledger)  # type: ignore[arg-type]
    w = world_on(proxy)  # type: ignore[arg-type]
    run_id = await admit(w, "consent_gate")
    assert await w.worker.perform_run(run_id, 0) is HopOutcome.PARKED
    debt: dict[UUID, int] = {}
    canceller = Canceller(w.deps, evidence_debt=debt)
    proxy.fail_once("append_step", LedgerUnavailable("append lost"), after=False)

    first = await canceller.cancel(run_id)
    assert first.status is RunStatus.CANCELLED
    assert await terminal_steps(w, run_id) == []  # owed, not written
    assert debt == {run_id: first.seq}

    again = await canceller.cancel(run_id)  # the re-read, before any relay pass

    assert again.status is RunStatus.CANCELLED
    assert await terminal_steps(w, run_id) == ["run.cancelled"]
    await canceller.cancel(run_id)
    assert await terminal_steps(w, run_id) == ["run.cancelled"]  # exactly once


# -- one terminal Step whoever writes it ----------------------------------------------


async def test_seed000_cancel_with_a_hop_writer_attached_writes_one_cancelled_step(
    ledger: Ledger,
) -> None:
    w = world_on(ledger)
    bus = EventBus()
    run_id = await admit(w, "echo")
    claim = await w.ledger.claim_delivery(run_id, 0, w.deps.boot_id, "tok", w.clock.now())
    assert claim.claimed and claim.run is not None
    canceller = Canceller(w.deps, bus=bus)

    # The hop's channel and Step writer are still attached while the canceller
    # commits CANCELLED and writes the terminal Step.
    async with HopEvents(w.deps, bus, claim.run, 0) as events:
        await events.publish("run.claimed", {"seq": 0})
        done = await canceller.cancel(run_id)
        assert done.status is RunStatus.CANCELLED
        await events.writer.barrier()

    assert await terminal_steps(w, run_id) == ["run.cancelled"]


@pytest.mark.parametrize("point", [faults.SETTLE_TERMINAL_COMMITTED, "writer.barrier"])
async def test_seed000_a_hop_cancelled_after_terminal_truth_still_owes_its_step(
    ledger: Ledger, point: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its broker job swept or aborted, a shutdown: the cancellation lands between
    the terminal commit and the Step; the debt stays for the relay to repair. The
    hop settles alone, as one whose Step writer is not idle does (an idle one
    writes the Step with truth: the next test)."""
    monkeypatch.setattr(HopEvents, "fold_terminal", settle_alone)
    w = world_on(ledger)
    run_id = await admit(w, "echo")
    with anyio.CancelScope() as scope:
        if point == "writer.barrier":
            from runtime.events.writer import StepWriter

            async def cancelled_barrier(self: StepWriter) -> None:
                scope.cancel()
                await anyio.sleep(1)

            monkeypatch.setattr(StepWriter, "barrier", cancelled_barrier)
        else:
            w.faults.observe(point, scope.cancel)
        await w.worker.perform_run(run_id, 0)
    assert scope.cancelled_caught
    assert (await run_of(w, run_id)).status is RunStatus.DONE
    assert w.worker.evidence_debt == {run_id: 0}


async def test_seed000_a_hop_cancelled_after_truth_written_with_its_step_owes_nothing(
    ledger: Ledger,
) -> None:
    """An idle writer's hop settles with its terminal Step (issue 17): a cancellation
    at the same point finds the evidence already durable, nothing is owed."""
    w = world_on(ledger)
    run_id = await admit(w, "echo")
    with anyio.CancelScope() as scope:
        w.faults.observe(faults.SETTLE_TERMINAL_COMMITTED, scope.cancel)
        await w.worker.perform_run(run_id, 0)
    assert (await run_of(w, run_id)).status is RunStatus.DONE
    assert await terminal_steps(w, run_id) == ["run.done"]
    assert w.worker.evidence_debt == {}
    assert await w.ledger.evidence_debts(None, 10) == []
