"""Failure rules of a resumed hop and terminal truth before cleanup (seed 003,
"Return makes a new claim" and "Truth closes first").

Each test parks a `consent_gate` Run, re-admits it with a verdict, damages
what the resumed hop needs, and checks the exact terminal reason.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from runtime.graph.runner import PINNED_PATTERN_UNAVAILABLE, STASIS_LOST
from runtime.models import DeliveryState, RunStatus
from runtime.patterns import default_registry
from runtime.recovery.reconcile import reconcile_runs
from runtime.registry import WorkflowRegistry
from runtime.stasis.consent import decide
from runtime.worker import HopOutcome, Worker
from tests.unit.fakes import World
from tests.unit.waitkit import admit, hop, run_of, tables, wait_world

pytestmark = pytest.mark.anyio


async def readmitted(w: World, **content: Any) -> UUID:
    """A consent_gate Run parked, approved, and QUEUED for its resume hop."""
    run_id = await admit(w, "consent_gate", **content)
    assert await hop(w, run_id) is HopOutcome.PARKED
    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None
    await decide(w.engine, consent_id, True, "alice")
    assert run_of(w, run_id).status is RunStatus.QUEUED
    return run_id


def document(w: World, run_id: UUID) -> dict[str, Any]:
    return tables(w).checkpoint_table[run_id].document


async def failed_with(w: World, run_id: UUID) -> str:
    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED
    assert tables(w).delivery_table[(run_id, run.seq)].state is DeliveryState.SETTLED
    assert w.effects.applied() == {}  # nothing after the gate ran
    assert run.error is not None
    return run.error


async def test_a_resumed_hop_without_a_checkpoint_fails_as_stasis_lost() -> None:
    w = wait_world()
    run_id = await readmitted(w)
    del tables(w).checkpoint_table[run_id]
    assert await failed_with(w, run_id) == STASIS_LOST == "stasis lost"


async def test_a_checkpoint_whose_pending_snapshot_belongs_elsewhere_is_stasis_lost() -> None:
    w = wait_world()
    run_id = await readmitted(w)
    document(w, run_id)["history"][-1]["run_id"] = str(UUID(int=0xF00))
    assert await failed_with(w, run_id) == STASIS_LOST


async def test_an_invalid_document_fails_the_hop_with_the_validator_text() -> None:
    w = wait_world()
    run_id = await readmitted(w)
    del document(w, run_id)["history"][-1]["node"]
    error = await failed_with(w, run_id)
    assert error.startswith("invalid checkpoint: ")
    assert "history.0.node.node" in error and "Field required" in error


async def test_a_state_that_fails_its_model_fails_with_the_validator_text() -> None:
    w = wait_world()
    run_id = await readmitted(w)
    document(w, run_id)["history"][-1]["state"]["rounds"] = 99
    error = await failed_with(w, run_id)
    assert error.startswith("invalid checkpoint state: ")
    assert "rounds" in error and "less than or equal to 10" in error


async def test_a_missing_pinned_pattern_fails_as_pinned_pattern_unavailable() -> None:
    w = wait_world()
    run_id = await readmitted(w)
    without = WorkflowRegistry()
    for name in default_registry().names():
        if name != "consent_gate":
            without.register(default_registry().latest(name))
    replacement = Worker(w.deps, without)
    assert await replacement.perform_run(run_id, 1) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert (run.status, run.error) == (RunStatus.FAILED, PINNED_PATTERN_UNAVAILABLE)


@pytest.mark.parametrize(
    "field,value",
    [("schema", "vessel.checkpoint/0"), ("pattern", "delegate"), ("pattern_version", 2)],
)
async def test_a_checkpoint_schema_or_pattern_mismatch_fails_as_pinned_pattern_unavailable(
    field: str, value: Any
) -> None:
    w = wait_world()
    run_id = await readmitted(w)
    document(w, run_id)[field] = value
    assert await failed_with(w, run_id) == PINNED_PATTERN_UNAVAILABLE


async def test_terminal_status_commits_before_checkpoint_deletion() -> None:
    w = wait_world(proxy=True)
    run_id = await readmitted(w)
    w.ledger.calls.clear()
    order: list[tuple[str, RunStatus, bool]] = []
    inner = tables(w)
    delete = inner.delete_checkpoint

    async def spy(rid: UUID) -> bool:
        order.append(("delete", inner.run_table[rid].status, rid in inner.checkpoint_table))
        return await delete(rid)

    inner.delete_checkpoint = spy  # type: ignore[method-assign]
    assert await hop(w, run_id) is HopOutcome.SETTLED
    calls = [c for c in w.ledger.calls if c in ("settle_run", "delete_checkpoint")]
    assert calls == ["settle_run", "delete_checkpoint"]
    assert order == [("delete", RunStatus.DONE, True)]
    assert run_id not in inner.checkpoint_table


async def test_a_failing_checkpoint_delete_does_not_change_terminal_truth() -> None:
    w = wait_world(proxy=True)
    run_id = await readmitted(w)
    w.ledger.fail_once("delete_checkpoint", RuntimeError("disk on fire"), after=False)

    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.DONE
    assert run.result == {"verdicts": ["APPROVED"]}
    assert run_id in tables(w).checkpoint_table  # retained stasis ...

    # ... cannot revive the Run: no claim, no re-admission, no resume.
    before = w.dump()
    assert await hop(w, run_id) is HopOutcome.SKIPPED
    consent_id = run.consent_id
    assert consent_id is not None
    assert await w.ledger.readmit_after_consent(run_id, consent_id, w.clock.now()) is None
    assert w.dump() == before

    # Startup's cleanup paging deletes it later; terminal truth is unchanged.
    await reconcile_runs(w.engine, w.clock.now())
    assert run_id not in tables(w).checkpoint_table
    assert run_of(w, run_id) == run
