"""Crash plans at the catalogued windows of the standalone workers (DESIGN
section 5): the simulator kills the worker process exactly at
`job.inference_returned` (leased_jobs, seed 004) and at
`service.submitted_before_ack` (service, seed 000), restarts it, and every
invariant holds, with the outcome the seeds prescribe for that window."""

from __future__ import annotations

import json
from typing import Any

import pytest

from runtime import faults
from runtime.jobs.models import EventKind
from runtime.service import EvidenceKind
from sim.faults.plan import AtPoint, FaultKind, FaultPlan, PlannedFault
from sim.kernel import SimResult, run_simulation
from sim.world import World


def crash_at(scenario: str, point: str, seed: int = 1, nth: int = 1) -> SimResult:
    plan = FaultPlan(faults=[PlannedFault(trigger=AtPoint(point=point, nth=nth),
                                          fault=FaultKind.CRASH)])
    result = run_simulation(seed, scenario, "calm", plan)
    assert result.ok, (result.invariant, result.violation, result.error)
    assert result.coverage["fires"].get(point) == 1, f"the plan never reached {point}"
    assert result.coverage["kinds"] == {"crash": 1}
    return result


def world_of(result: SimResult) -> World:
    assert result.world is not None
    return result.world


def crashed(result: SimResult) -> list[dict[str, Any]]:
    return [json.loads(line)["data"] for line in result.trace_lines
            if json.loads(line)["event"] == "process.crash"]


@pytest.mark.parametrize(("seed", "nth"), [(1, 1), (2, 1), (3, 2), (4, 3)])
def test_crash_at_job_inference_returned_the_old_fence_never_lands(seed: int, nth: int) -> None:
    result = crash_at("leased_jobs", faults.JOB_INFERENCE_RETURNED, seed, nth)
    (death,) = crashed(result)
    assert death["reason"] == f"crash at {faults.JOB_INFERENCE_RETURNED}"
    world = world_of(result)
    # The dead worker had its reply in hand: the provider answered it, nothing was staged.
    (key,) = [k for k, c in world.model.calls.items()
              if c.worker == death["process"] and c.outcome == "replied"
              and not any(e.kind is EventKind.COMPLETED and e.worker == death["process"]
                          for e in world.jobs.event_log[k[0]])]
    job_id, _, call = key
    job = world.jobs.job_table[job_id]
    events = world.jobs.event_log[job_id]
    (started,) = [e for e in events if e.kind is EventKind.STARTED
                  and e.worker == death["process"]]
    assert any(e.kind is EventKind.EXPIRED_LEASE and e.fence == started.fence for e in events)
    assert job.fence > started.fence and job.model_calls_reserved >= call
    assert started.fence not in [i.fence for i in world.jobs.interpretation_table.get(job_id, [])]
    assert job.state.terminal or job.state.waiting
    assert job.evidence_id in world.jobs.evidence_table


@pytest.mark.parametrize(("seed", "nth"), [(1, 1), (2, 1), (3, 2), (4, 3)])
def test_crash_at_service_submitted_before_ack_is_adopted_never_resubmitted(
    seed: int, nth: int
) -> None:
    result = crash_at("service", faults.SERVICE_SUBMITTED_BEFORE_ACK, seed, nth)
    (death,) = crashed(result)
    assert death["reason"] == f"crash at {faults.SERVICE_SUBMITTED_BEFORE_ACK}"
    world = world_of(result)
    provider = world.provider
    # The provider job whose acknowledgement died with the process.
    stuck = [a for a in world.services.attempt_table.values()
             if a.provider_job_id is not None
             and EvidenceKind.ACCEPTED not in [e.kind for e in a.evidence]
             and a.transmissions == 1]
    assert stuck, "no attempt was left to reconciliation by lookup"
    for attempt in stuck:
        assert EvidenceKind.LOOKUP_FOUND in [e.kind for e in attempt.evidence]
        assert attempt.state.terminal
        assert provider.by_key[attempt.idempotency_key] == [attempt.provider_job_id]
    assert all(len(jobs) == 1 for jobs in provider.by_key.values())  # one effect per key


def test_a_late_result_at_job_inference_returned_is_refused_by_the_newer_fence() -> None:
    plan = FaultPlan(faults=[PlannedFault(
        trigger=AtPoint(point=faults.JOB_INFERENCE_RETURNED, nth=1),
        fault=FaultKind.LATE_RESULT, amount=200.0)])
    result = run_simulation(2, "leased_jobs", "calm", plan)
    assert result.ok, (result.invariant, result.violation, result.error)
    assert result.coverage["fires"] == {faults.JOB_INFERENCE_RETURNED: 1}
    world = world_of(result)
    refused = [e for events in world.jobs.event_log.values() for e in events if e.refused]
    assert refused and all(e.kind is EventKind.COMPLETED and e.usage is not None
                           for e in refused)
    for e in refused:
        fences = [i.fence for i in world.jobs.interpretation_table.get(e.job_id, [])]
        assert e.fence not in fences


def test_swarm_campaigns_fire_both_points() -> None:
    fires = {faults.JOB_INFERENCE_RETURNED: 0, faults.SERVICE_SUBMITTED_BEFORE_ACK: 0}
    for scenario in ("leased_jobs", "service"):
        for seed in range(1, 21):
            r = run_simulation(seed, scenario, "swarm")
            assert r.ok, (scenario, seed, r.invariant, r.error)
            for point in fires:
                fires[point] += r.coverage["fires"].get(point, 0)
    assert all(n > 0 for n in fires.values()), fires
