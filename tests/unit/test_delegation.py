"""Delegated AgentJob waits (seed 000, "Delegated AgentJob labor").

The `delegate` Pattern hands a task to the agent runtime and, resumed,
adopts the terminal result of exactly the job that owns its wait.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from runtime.adapters.reference import ReferenceAgentRuntime
from runtime.cancel import Canceller
from runtime.models import AgentJobStatus, DeliveryState, ResumeMode, RunStatus
from runtime.stasis.delegate import refresh_delegate
from runtime.worker import HopOutcome
from tests.unit.fakes import World
from tests.unit.waitkit import FakeAgents, admit, hop, run_of, tables, wait_world

pytestmark = pytest.mark.anyio


async def delegated(w: World) -> tuple[UUID, UUID]:
    """A delegate Run parked on its job: (run id, job id)."""
    run_id = await admit(w, "delegate", task="translate")
    assert await hop(w, run_id) is HopOutcome.PARKED
    job_id = run_of(w, run_id).agent_job_id
    assert job_id is not None
    return run_id, job_id


async def test_delegate_parks_awaiting_delegate_with_the_exact_agent_job() -> None:
    agents = FakeAgents()
    w = wait_world(agents=agents)
    run_id, job_id = await delegated(w)

    run = run_of(w, run_id)
    assert run.status is RunStatus.AWAITING_DELEGATE
    (job,) = tables(w).agent_job_table.values()
    assert job.id == job_id and job.run_id == run_id and job.seq == 0
    assert job.request == {"task": "translate"} and job.node == "adopt"
    assert agents.submitted == [job_id]
    assert tables(w).checkpoint_table[run_id].agent_job_id == job_id
    assert tables(w).delivery_table[(run_id, 0)].state is DeliveryState.SETTLED


async def test_resume_adopts_the_terminal_result_of_the_owning_job() -> None:
    agents = FakeAgents()
    w = wait_world(agents=agents)
    run_id, job_id = await delegated(w)

    assert await refresh_delegate(w.engine, run_of(w, run_id)) is None  # still running
    assert run_of(w, run_id).status is RunStatus.AWAITING_DELEGATE

    agents.finish(job_id, AgentJobStatus.SUCCEEDED, {"text": "bonjour"})
    delivery = await refresh_delegate(w.engine, run_of(w, run_id))
    assert delivery is not None
    assert (delivery.seq, delivery.mode) == (1, ResumeMode.RESUME)
    assert tables(w).agent_job_table[job_id].status is AgentJobStatus.SUCCEEDED

    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.DONE
    assert run.result == {"job": str(job_id), "answer": {"text": "bonjour"}}


async def test_a_succeeded_report_without_a_dict_result_does_not_readmit() -> None:
    agents = FakeAgents()
    w = wait_world(agents=agents)
    run_id, job_id = await delegated(w)
    for bad in (None, "bonjour", ["a"]):
        agents.finish(job_id, AgentJobStatus.SUCCEEDED, bad)
        before = w.dump()
        assert await refresh_delegate(w.engine, run_of(w, run_id)) is None
        assert w.dump() == before
    assert run_of(w, run_id).status is RunStatus.AWAITING_DELEGATE
    assert tables(w).agent_job_table[job_id].status is AgentJobStatus.SUBMITTED


async def test_only_the_job_owning_the_wait_can_readmit() -> None:
    agents = FakeAgents()
    w = wait_world(agents=agents)
    run_id, _ = await delegated(w)
    before = w.dump()
    assert await w.ledger.readmit_after_delegate(run_id, UUID(int=0xBEEF), w.clock.now()) is None
    assert w.dump() == before


async def test_a_job_unknown_to_the_runtime_is_readopted_by_idempotent_submit() -> None:
    agents = FakeAgents()
    w = wait_world(agents=agents)
    run_id, job_id = await delegated(w)
    agents.forget()  # the runtime's process-local projection is gone

    assert await refresh_delegate(w.engine, run_of(w, run_id)) is None
    assert agents.submitted == [job_id, job_id]  # the same identity, never a new one
    assert list(tables(w).agent_job_table) == [job_id]
    assert run_of(w, run_id).status is RunStatus.AWAITING_DELEGATE

    agents.finish(job_id, AgentJobStatus.SUCCEEDED, {"text": "again"})
    assert await refresh_delegate(w.engine, run_of(w, run_id)) is not None
    assert await hop(w, run_id) is HopOutcome.SETTLED
    assert run_of(w, run_id).result == {"job": str(job_id), "answer": {"text": "again"}}


async def test_the_reference_runtime_rebuilds_a_lost_projection_from_the_request() -> None:
    agents = ReferenceAgentRuntime()
    w = wait_world(agents=agents)
    run_id, job_id = await delegated(w)
    agents.jobs.clear()

    assert await refresh_delegate(w.engine, run_of(w, run_id)) is None  # re-adopted
    assert await refresh_delegate(w.engine, run_of(w, run_id)) is not None
    assert await hop(w, run_id) is HopOutcome.SETTLED
    result = run_of(w, run_id).result
    assert result is not None and result["answer"]["answer"] == {"task": "translate"}
    assert result["job"] == result["answer"]["job"] == str(job_id)


async def test_lost_is_terminal_for_adoption_and_polling() -> None:
    agents = FakeAgents()
    w = wait_world(agents=agents)
    run_id, job_id = await delegated(w)
    agents.finish(job_id, AgentJobStatus.LOST)
    await w.ledger.record_agent_job(job_id, AgentJobStatus.LOST, None, w.clock.now())

    # The runtime now claims success, but LOST truth is neither polled nor replaced.
    agents.finish(job_id, AgentJobStatus.SUCCEEDED, {"text": "late"})
    assert await w.ledger.record_agent_job(
        job_id, AgentJobStatus.SUCCEEDED, {"text": "late"}, w.clock.now()
    ) == tables(w).agent_job_table[job_id]
    assert await refresh_delegate(w.engine, run_of(w, run_id)) is not None
    assert agents.lookups == []
    assert tables(w).agent_job_table[job_id].status is AgentJobStatus.LOST

    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "LOST" in run.error and "late" not in str(run.result)


async def test_cancelling_a_parent_of_a_lost_job_still_calls_the_runtime_cancel() -> None:
    agents = FakeAgents(cancel_acks=[False, True])
    w = wait_world(agents=agents)
    run_id, job_id = await delegated(w)
    await w.ledger.record_agent_job(job_id, AgentJobStatus.LOST, None, w.clock.now())
    at_cancel: list[AgentJobStatus] = []
    agents.on_cancel = lambda jid: at_cancel.append(tables(w).agent_job_table[jid].status)
    canceller = Canceller(w.deps)

    first = await canceller.cancel(run_id)
    assert first.status is RunStatus.CANCELLING  # the runtime did not acknowledge
    assert tables(w).agent_job_table[job_id].status is AgentJobStatus.LOST

    second = await canceller.cancel(run_id)
    assert second.status is RunStatus.CANCELLED
    assert agents.cancels == [job_id, job_id]
    # LOST -> CANCELLED was recorded only after the runtime returned True.
    assert at_cancel == [AgentJobStatus.LOST, AgentJobStatus.LOST]
    assert tables(w).agent_job_table[job_id].status is AgentJobStatus.CANCELLED


async def test_without_an_agent_runtime_a_delegation_fails_and_writes_no_job() -> None:
    w = wait_world()
    run_id = await admit(w, "delegate")
    assert await hop(w, run_id) is HopOutcome.SETTLED
    run = run_of(w, run_id)
    assert run.status is RunStatus.FAILED and run.error == "no agent runtime is configured"
    assert tables(w).agent_job_table == {}
