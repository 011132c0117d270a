"""GraphRunner and its checkpoint document (seed 003, "What crosses the threshold").

One test per rule: where a fresh and a resumed hop start, the shape and
status lifecycle of the one document kept per Run, zero hardware counters
for states stored before the budget field existed, and that nothing but
declared state is ever stored.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from runtime.graph.budget import HardwareResumeBudget, HardwareState
from runtime.graph.runner import GraphRunner
from runtime.graph.snapshots import SCHEMA, Checkpoint, EndSnapshot, NodeSnapshot, SnapshotStatus
from runtime.graph.transitions import AwaitConsent, End, NeedHardware
from runtime.hop import HopContext
from runtime.models import ConsentStatus, ResumeMode, RunStatus, Settlement
from runtime.patterns.waits import HardwareNeeds
from runtime.registry import Node, Pattern
from runtime.stasis.consent import decide
from runtime.worker import HopOutcome
from tests.unit.fakes import pattern_of
from tests.unit.waitkit import FakeOrchestrator, admit, hop, run_of, tables, wait_world

pytestmark = pytest.mark.anyio

State = dict[str, Any]


async def test_fresh_hop_starts_at_the_first_node_with_the_intent_content() -> None:
    visited: list[tuple[str, State]] = []

    def body(name: str) -> Any:
        async def node(ctx: HopContext, state: State) -> State:
            visited.append((name, dict(state)))
            return {**state, name: True}
        return node

    p = pattern_of("three", body("a"), body("b"), body("c"))
    w = wait_world(p)
    run_id = await admit(w, "three", seed=1)

    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert visited == [("a", {"seed": 1}), ("b", {"seed": 1, "a": True}),
                       ("c", {"seed": 1, "a": True, "b": True})]
    assert run_of(w, run_id).result == {"seed": 1, "a": True, "b": True, "c": True}


async def test_resumed_hop_continues_from_the_first_pending_snapshot() -> None:
    visited: list[str] = []

    class S(BaseModel):
        model_config = ConfigDict(extra="forbid")
        trail: list[str] = []

    def body(name: str, ask: bool = False) -> Any:
        async def node(ctx: HopContext, state: S) -> Any:
            visited.append(name)
            state = S(trail=[*state.trail, name])
            return (state, AwaitConsent(then="after")) if ask else state
        return node

    p = Pattern(name="resumable", version=1, state_model=S, nodes=(
        Node("first", body("first")), Node("ask", body("ask", ask=True)),
        Node("skipped", body("skipped")), Node("after", body("after")),
    ))
    w = wait_world(p)
    run_id = await admit(w, "resumable")
    assert await hop(w, run_id) is HopOutcome.PARKED
    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None
    await decide(w.engine, consent_id, True, "alice")
    assert w.ledger.delivery_table[(run_id, 1)].mode is ResumeMode.RESUME

    visited.clear()
    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert visited == ["after"]
    assert run_of(w, run_id).result == {"trail": ["first", "ask", "after"]}


async def test_checkpoint_is_one_document_per_run_with_a_snapshot_status_lifecycle() -> None:
    w = wait_world(proxy=True)
    run_id = await admit(w, "consent_gate", rounds=2)
    saved: list[Checkpoint] = []
    inner_save = tables(w).save_checkpoint

    async def spy(record: Any) -> bool:
        saved.append(Checkpoint.model_validate(record.document))
        return await inner_save(record)

    tables(w).save_checkpoint = spy  # type: ignore[method-assign]

    assert await hop(w, run_id) is HopOutcome.PARKED
    first = run_of(w, run_id).consent_id
    assert first is not None
    await decide(w.engine, first, True, "alice")
    assert await hop(w, run_id) is HopOutcome.PARKED
    second = run_of(w, run_id).consent_id

    # One document per Run, replaced (never appended as a second record).
    assert len(tables(w).dump_now().checkpoints) == 1
    doc = tables(w).checkpoint_table[run_id].document
    assert doc["schema"] == SCHEMA and doc["run_id"] == str(run_id)
    assert (doc["pattern"], doc["pattern_version"]) == ("consent_gate", 1)

    # The first park stored a pending snapshot; the second hop resumed it,
    # ran it to success and stored the next pending one after it.
    assert [(s.node, s.status, s.consent_id) for s in saved[0].history
            if isinstance(s, NodeSnapshot)] == [("decided", SnapshotStatus.PENDING, first)]
    assert [(s.node, s.status, s.consent_id) for s in saved[1].history
            if isinstance(s, NodeSnapshot)] == [
        ("decided", SnapshotStatus.SUCCESS, first),
        ("decided", SnapshotStatus.PENDING, second),
    ]
    assert saved[1].first_resumable() is saved[1].history[1]


async def test_a_finished_walk_appends_an_end_snapshot_with_final_state_and_result() -> None:
    async def last(ctx: HopContext, state: State) -> Any:
        return {**state, "x": 2}, End(result={"answer": 2})

    p = pattern_of("ending", last)
    w = wait_world(p)
    run_id = await admit(w, "ending", x=1)
    claim = await w.ledger.claim_delivery(run_id, 0, "boot-1", "t", w.clock.now())
    assert claim.run is not None
    checkpoint = Checkpoint(run_id=run_id, pattern="ending", pattern_version=1)
    runner = GraphRunner(HopContext(w.deps, claim.run, 0), p)

    outcome = await runner._walk(checkpoint, "n0", {"x": 1})

    assert isinstance(outcome, Settlement) and outcome.status is RunStatus.DONE
    assert checkpoint.history == [EndSnapshot(state={"x": 2}, result={"answer": 2})]
    # Both snapshot kinds round-trip through the stored document.
    checkpoint.history.insert(0, NodeSnapshot(node="n0", state={"x": 1}, run_id=run_id,
                                              status=SnapshotStatus.SUCCESS))
    assert Checkpoint.model_validate(checkpoint.document()) == checkpoint
    assert NodeSnapshot(node="n", state={}, run_id=run_id).status is SnapshotStatus.CREATED


def test_hardware_state_without_the_budget_field_decodes_with_zero_counters() -> None:
    old = {"needs": ["gpu"], "used": []}  # written before hardware_resume_budget existed
    state = HardwareNeeds.model_validate(old)
    assert state.hardware_resume_budget == HardwareResumeBudget()
    assert (state.hardware_resume_budget.total, state.hardware_resume_budget.consecutive,
            state.hardware_resume_budget.last_capability) == (0, 0, None)
    assert HardwareState.model_validate({}).hardware_resume_budget.total == 0


async def test_a_stored_state_without_budget_resumes_with_zero_counters() -> None:
    class Plan(HardwareState):
        steps: list[str] = []

    async def step(ctx: HopContext, state: Plan) -> Any:
        if not state.steps:
            b = state.hardware_resume_budget
            return state, End(result={"total": b.total, "consecutive": b.consecutive})
        head, rest = state.steps[0], state.steps[1:]
        state = state.model_copy(update={"steps": rest})
        if head == "consent":
            return state, AwaitConsent(then="step")
        return state, NeedHardware(capability=head, then="step")

    p = Pattern(name="plan", version=1, state_model=Plan, nodes=(Node("step", step),))
    w = wait_world(p, orchestrator=FakeOrchestrator())
    run_id = await admit(w, "plan", steps=["gpu", "consent", "gpu"])
    assert await hop(w, run_id) is HopOutcome.PARKED
    doc = tables(w).checkpoint_table[run_id].document
    pending = doc["history"][-1]
    assert pending["state"]["hardware_resume_budget"]["total"] == 1
    del pending["state"]["hardware_resume_budget"]  # an upgrade-era document

    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None
    await decide(w.engine, consent_id, True, "alice")
    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert run_of(w, run_id).result == {"total": 1, "consecutive": 1}


async def test_checkpoint_holds_only_declared_state() -> None:
    w = wait_world()
    run_id = await admit(w, "consent_gate", rounds=2)
    assert await hop(w, run_id) is HopOutcome.PARKED
    consent_id = run_of(w, run_id).consent_id
    assert consent_id is not None
    await decide(w.engine, consent_id, True, "alice")
    assert await hop(w, run_id) is HopOutcome.PARKED

    doc = tables(w).checkpoint_table[run_id].document
    assert set(doc) == {"schema", "run_id", "pattern", "pattern_version", "history"}
    for snap in doc["history"]:
        assert set(snap) == {"kind", "node", "state", "status", "run_id", "consent_id",
                             "agent_job_id", "service_attempt_id"}
        # The typed state's declared fields, nothing else: no verdict, principal,
        # prompt, grant or handle rides along.
        assert set(snap["state"]) == {"rounds", "approvals", "verdicts"}
    assert doc["history"][-1]["state"] == {"rounds": 1, "approvals": 1,
                                           "verdicts": [ConsentStatus.APPROVED.value]}
    text = repr(doc)
    assert "alice" not in text and "may I?" not in text

    # The document model itself refuses anything undeclared.
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        Checkpoint.model_validate({**doc, "grant": "secret"})
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        Checkpoint.model_validate(
            {**doc, "history": [{**doc["history"][0], "handle": "socket"}]}
        )


async def test_a_state_holding_a_live_object_never_reaches_the_ledger() -> None:
    class Handle:
        pass

    async def leak(ctx: HopContext, state: State) -> Any:
        return {**state, "handle": Handle()}, AwaitConsent(then="n1")

    async def after(ctx: HopContext, state: State) -> State:
        return state

    w = wait_world(pattern_of("leaky", leak, after))
    run_id = await admit(w, "leaky")
    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "Handle" in run.error
    assert tables(w).checkpoint_table == {}
    assert tables(w).consent_table == {}
