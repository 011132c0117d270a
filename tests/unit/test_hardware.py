"""Live hardware stasis and its budget (seed 003, "Three boundaries").

The same hop checkpoints, marks AWAITING_HARDWARE, awaits a bounded
orchestrator call and returns to RUNNING, then continues from the state the
checkpoint holds. At most 8 convergence calls per Run and 3 in a row per
capability; the counters travel in the checkpoint.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from runtime import faults
from runtime.graph.budget import MAX_CONSECUTIVE, MAX_TOTAL
from runtime.models import RunStatus
from runtime.patterns import default_registry
from runtime.stasis import waits as waits_module
from runtime.stasis.consent import decide
from runtime.worker import HopOutcome, Worker
from tests.unit.waitkit import PLAN, FakeOrchestrator, admit, hop, run_of, tables, wait_world

pytestmark = pytest.mark.anyio


async def test_hardware_wait_checkpoints_then_awaits_then_returns_to_running() -> None:
    seen: list[tuple[str, RunStatus, dict[str, Any]]] = []
    orchestrator = FakeOrchestrator()
    w = wait_world(PLAN, orchestrator=orchestrator, proxy=True)

    def observe(where: str) -> Any:
        def fn(*_: Any) -> None:
            (run,) = tables(w).run_table.values()
            record = tables(w).checkpoint_table.get(run.id)
            doc = record.document["history"][-1] if record else {}
            seen.append((where, run.status, doc))
        return fn

    w.faults.observe(faults.HARDWARE_AWAITING, observe("awaiting"))
    orchestrator.on_call = observe("converge")
    run_id = await admit(w, "plan", steps=["gpu"])
    assert await hop(w, run_id) is HopOutcome.SETTLED

    assert [(where, status) for where, status, _ in seen] == [
        ("awaiting", RunStatus.AWAITING_HARDWARE), ("converge", RunStatus.AWAITING_HARDWARE)]
    snap = seen[0][2]
    assert snap["status"] == "pending" and snap["node"] == "step"
    assert snap["state"]["hardware_resume_budget"] == {
        "total": 1, "consecutive": 1, "last_capability": "gpu"}
    run = run_of(w, run_id)
    assert run.status is RunStatus.DONE and run.seq == 0  # the same hop, no re-admission
    assert run.result is not None
    assert run.result["trail"] == ["RUNNING", "RUNNING"]  # back to RUNNING after the wait
    assert orchestrator.calls == ["gpu"]
    hardware = ("save_checkpoint", "await_hardware", "resume_hardware", "load_checkpoint")
    assert [c for c in w.ledger.calls if c in hardware] == list(hardware)


async def test_after_the_wait_the_hop_continues_from_the_checkpointed_state() -> None:
    orchestrator = FakeOrchestrator()
    w = wait_world(PLAN, orchestrator=orchestrator)

    def edit_checkpoint(run_id: UUID, capability: str) -> None:
        record = tables(w).checkpoint_table[run_id]
        record.document["history"][-1]["state"]["trail"].append("from-checkpoint")

    orchestrator.on_call = edit_checkpoint
    run_id = await admit(w, "plan", steps=["gpu"])
    assert await hop(w, run_id) is HopOutcome.SETTLED
    result = run_of(w, run_id).result
    assert result is not None and result["trail"] == ["RUNNING", "from-checkpoint", "RUNNING"]


async def test_the_ninth_convergence_call_fails_before_the_orchestrator() -> None:
    orchestrator = FakeOrchestrator()
    w = wait_world(PLAN, orchestrator=orchestrator)
    steps = ["a", "b"] * 4 + ["c"]
    run_id = await admit(w, "plan", steps=steps)
    assert await hop(w, run_id) is HopOutcome.SETTLED

    assert orchestrator.calls == steps[:MAX_TOTAL]  # the 9th was never asked
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "hardware budget exhausted for 'c'" in run.error
    assert f"8/{MAX_TOTAL} calls" in run.error


async def test_the_fourth_call_in_a_row_for_one_capability_fails_before_the_orchestrator(
) -> None:
    orchestrator = FakeOrchestrator()
    w = wait_world(PLAN, orchestrator=orchestrator)
    run_id = await admit(w, "plan", steps=["gpu"] * 4)
    assert await hop(w, run_id) is HopOutcome.SETTLED

    assert orchestrator.calls == ["gpu"] * MAX_CONSECUTIVE
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and f"3/{MAX_CONSECUTIVE} in a row" in run.error


async def test_another_capability_in_between_resets_the_run_of_one_capability() -> None:
    orchestrator = FakeOrchestrator()
    w = wait_world(PLAN, orchestrator=orchestrator)
    steps = ["gpu"] * 3 + ["tts"] + ["gpu"] * 3
    run_id = await admit(w, "plan", steps=steps)
    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert orchestrator.calls == steps
    result = run_of(w, run_id).result
    assert result is not None and (result["total"], result["consecutive"]) == (7, 3)


async def test_counters_persist_across_a_durable_park_and_a_replacement_runner() -> None:
    orchestrator = FakeOrchestrator()
    w = wait_world(PLAN, orchestrator=orchestrator)
    run_id = await admit(w, "plan", steps=["gpu", "gpu", "consent", "gpu", "gpu"])
    assert await hop(w, run_id) is HopOutcome.PARKED
    stored = tables(w).checkpoint_table[run_id].document["history"][-1]["state"]
    assert stored["hardware_resume_budget"] == {
        "total": 2, "consecutive": 2, "last_capability": "gpu"}
    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None
    await decide(w.engine, consent_id, True, "alice")

    # A different Worker with its own registry object runs the resumed hop.
    registry = default_registry()
    registry.register(PLAN)
    replacement = Worker(w.deps, registry)
    assert await replacement.perform_run(run_id, 1) is HopOutcome.SETTLED

    # Third in a row is allowed, the fourth (second after the park) is refused.
    assert orchestrator.calls == ["gpu", "gpu", "gpu"]
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "3/3 in a row" in run.error


async def test_total_counter_persists_across_a_durable_park() -> None:
    orchestrator = FakeOrchestrator()
    w = wait_world(PLAN, orchestrator=orchestrator)
    steps = ["a", "b"] * 3 + ["consent"] + ["a", "b", "c"]
    run_id = await admit(w, "plan", steps=steps)
    assert await hop(w, run_id) is HopOutcome.PARKED
    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None
    await decide(w.engine, consent_id, True, "alice")
    assert await hop(w, run_id) is HopOutcome.SETTLED

    assert orchestrator.calls == ["a", "b"] * 3 + ["a", "b"]
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "8/8 calls" in run.error


async def test_an_orchestrator_failure_fails_the_run_with_the_reason() -> None:
    orchestrator = FakeOrchestrator(fail_with=RuntimeError("no GPU left on this host"))
    w = wait_world(PLAN, orchestrator=orchestrator)
    run_id = await admit(w, "plan", steps=["gpu"])
    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error == "hardware 'gpu' unavailable: no GPU left on this host"


async def test_an_orchestrator_timeout_fails_the_run_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(waits_module, "HARDWARE_TIMEOUT_S", 0.05)
    orchestrator = FakeOrchestrator(block=True)
    w = wait_world(PLAN, orchestrator=orchestrator)
    run_id = await admit(w, "plan", steps=["gpu"])
    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error == "hardware 'gpu' not ready within 0.05s"
    assert tables(w).checkpoint_table == {}  # terminal: stasis cleaned up


async def test_without_an_orchestrator_a_hardware_request_fails_without_a_wait() -> None:
    w = wait_world(PLAN)
    run_id = await admit(w, "plan", steps=["gpu"])
    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED and run.error == "no orchestrator is configured"
    assert faults.HARDWARE_AWAITING not in w.faults.names()
