"""Startup reconciliation against seed 000_81a5c720b14d934a.txt.

"Events, settlement, and waits": cleanup failure cannot conceal terminal
truth; "Cancellation, mutation, and recovery": startup retries idempotent
checkpoint deletion as best effort, and the relay keeps retrying it.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from runtime.cancel import Canceller
from runtime.errors import LedgerUnavailable
from runtime.models import RunStatus
from runtime.recovery.reconcile import reconcile_runs
from runtime.recovery.relay import Relays
from runtime.stasis.consent import decide
from runtime.worker import HopOutcome
from tests.unit.fakes import World
from tests.unit.waitkit import admit, hop, reboot, run_of, tables, wait_world

pytestmark = pytest.mark.anyio


def stick_checkpoints(w: World) -> list[UUID]:
    """Every checkpoint deletion fails from now on (a held lock, a storage fault)."""
    attempts: list[UUID] = []

    async def refuse(run_id: UUID) -> bool:
        attempts.append(run_id)
        raise LedgerUnavailable("checkpoint row locked")

    tables(w).delete_checkpoint = refuse  # type: ignore[method-assign]
    return attempts


async def done_with_checkpoint(w: World) -> UUID:
    """A consent_gate Run settled DONE whose checkpoint deletion failed."""
    run_id = await admit(w, "consent_gate")
    assert await hop(w, run_id) is HopOutcome.PARKED
    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None
    await decide(w.engine, consent_id, True, "alice")
    stick_checkpoints(w)
    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert run_of(w, run_id).status is RunStatus.DONE
    assert run_id in tables(w).checkpoint_table
    return run_id


async def test_cleanup_failure_cannot_block_startup_the_checkpoint_is_owed() -> None:
    w = wait_world()
    done = await done_with_checkpoint(w)
    queued = await admit(w, "echo")  # later phases of the pass must still run for it
    w2 = reboot(w)
    attempts = stick_checkpoints(w2)

    report = await reconcile_runs(w2.engine, w2.clock.now())

    assert done in attempts  # startup tried the deletion ...
    assert report.cleanup_owed == [done]  # ... owes it, and is not degraded by it
    assert not report.degraded
    assert queued in [rid for ids in report.deliveries.values() for rid in ids]
    assert run_of(w2, done).status is RunStatus.DONE  # terminal truth unchanged


async def test_the_relay_retries_owed_checkpoint_deletion_until_it_lands() -> None:
    w = wait_world()
    done = await done_with_checkpoint(w)
    w2 = reboot(w)
    attempts = stick_checkpoints(w2)
    await reconcile_runs(w2.engine, w2.clock.now())
    relays = Relays(w2.engine, w2.clock.now(), Canceller(w2.engine.deps))

    await relays.pass_once()  # still stuck: retried, owed again, nothing raised
    assert attempts.count(done) == 2
    assert done in tables(w2).checkpoint_table

    del tables(w2).delete_checkpoint  # the storage lets go
    await relays.pass_once()
    assert done not in tables(w2).checkpoint_table
    assert await w2.ledger.checkpoint_debts(10) == []
    assert run_of(w2, done).status is RunStatus.DONE
