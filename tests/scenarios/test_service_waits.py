"""Service waits under the simulator (seed 000_81a5c720b14d934a.txt, "Service
job attempts"): Runs of `service_call` park AWAITING_SERVICE on the attempt
they own and resume only through the owner CAS from a proven terminal state.

Crash-window tests crash exactly once at a named point and assert the
window's own outcome; the scenario tests run the `service_wait` campaign
scenario over fixed seeds; the break test proves the checker notices a Run
re-admitted from an attempt that is not terminal.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime import faults
from runtime.models import RunStatus
from runtime.recovery.orphans import LOST
from runtime.service import ServiceJobAttempt, ServiceState
from sim.faults.plan import AtPoint, FaultKind, FaultPlan, PlannedFault
from sim.kernel import SimResult, run_simulation
from sim.provider import LIVE
from sim.scenarios import resolve
from sim.scenarios.windows import window_scenario
from tests.scenarios.test_windows import crash_at as crash_window
from tests.scenarios.test_windows import startups, the_run


def crash_at(point: str) -> SimResult:
    return crash_window(point, "service_call")


def attempts(result: SimResult) -> list[ServiceJobAttempt]:
    assert result.world is not None
    return sorted(result.world.services.attempt_table.values(), key=lambda a: a.created_at)


def provider_jobs(result: SimResult) -> dict[str, list[str]]:
    assert result.world is not None
    return result.world.provider.by_key


def test_a_service_call_parks_sends_once_and_resumes_from_the_terminal_attempt() -> None:
    result = run_simulation(1, window_scenario("service_call"), "calm")
    assert result.ok, result.violation
    run = the_run(result)
    [attempt] = attempts(result)
    assert run.service_attempt_id == attempt.id and attempt.owner.run_id == run.id
    assert attempt.state.terminal and attempt.transmissions == 1
    assert provider_jobs(result) == {attempt.idempotency_key: [attempt.provider_job_id]}
    assert run.seq == 1  # exactly one resume, through the owner CAS
    if attempt.state is ServiceState.SUCCEEDED:
        assert run.status is RunStatus.DONE
        assert run.result == {"attempt": str(attempt.id), "answer": attempt.result}
    else:
        assert run.status is RunStatus.FAILED


def test_window_service_checkpoint_saved_without_attempt_fails_as_lost() -> None:
    r = crash_at(faults.SERVICE_CHECKPOINT_SAVED)
    run = the_run(r)
    assert run.status is RunStatus.FAILED and run.error == LOST
    assert attempts(r) == [] and provider_jobs(r) == {}


def test_window_service_parked_is_sent_by_recovery_once_and_resumes() -> None:
    r = crash_at(faults.SERVICE_PARKED)
    run = the_run(r)
    [attempt] = attempts(r)
    assert attempt.state.terminal and attempt.transmissions == 1
    assert len(provider_jobs(r)[attempt.idempotency_key]) == 1
    assert run.status in (RunStatus.DONE, RunStatus.FAILED) and run.seq == 1


def test_window_service_submitted_before_ack_in_the_vessel_is_adopted_by_lookup() -> None:
    """The provider started the job; the Vessel died before persisting its id."""
    r = crash_at(faults.SERVICE_SUBMITTED_BEFORE_ACK)
    run = the_run(r)
    [attempt] = attempts(r)
    assert attempt.transmissions == 1  # adopted, never sent again
    assert provider_jobs(r)[attempt.idempotency_key] == [attempt.provider_job_id]
    assert run.status in (RunStatus.DONE, RunStatus.FAILED) and run.seq == 1


def test_a_crash_after_the_attempt_row_parks_the_orphan_on_it() -> None:
    """Between the PREPARED attempt and the park: startup parks the exact window."""
    plan = FaultPlan(faults=[PlannedFault(trigger=AtPoint(point="service.prepare", nth=1),
                                          fault=FaultKind.WORKER_CRASH)])
    r = run_simulation(1, window_scenario("service_call"), "calm", plan)
    assert r.ok, (r.invariant, r.error, r.violation)
    assert startups(r)[1]["orphans"] == {"parked_service": 1}
    run = the_run(r)
    [attempt] = attempts(r)
    assert run.service_attempt_id == attempt.id and attempt.transmissions == 1
    assert run.status in (RunStatus.DONE, RunStatus.FAILED) and run.seq == 1


def test_cancelling_a_parked_run_contains_its_attempt_before_cancelled() -> None:
    r = run_simulation(1, window_scenario("service_call", cancel_at=0.5), "calm")
    assert r.ok, (r.invariant, r.error, r.violation)
    run = the_run(r)
    [attempt] = attempts(r)
    assert run.status is RunStatus.CANCELLED
    assert attempt.state is ServiceState.CANCELLED
    assert r.world is not None
    jobs = [r.world.provider.jobs[j] for j in provider_jobs(r).get(attempt.idempotency_key, [])]
    assert all(job.status not in LIVE for job in jobs)


@pytest.mark.parametrize("seed", range(1, 9))
def test_service_wait_scenario_holds_under_swarm(seed: int) -> None:
    [scenario] = resolve("service_wait")
    result = run_simulation(seed, scenario, "swarm")
    assert result.ok, (result.invariant, result.error, result.violation)
    assert result.world is not None
    for run in result.world.ledger.run_table.values():
        if run.status is RunStatus.AWAITING_SERVICE:  # only honestly unproven waits remain
            attempt = result.world.services.attempt_table[run.service_attempt_id]  # type: ignore[index]
            assert attempt.state is ServiceState.INDETERMINATE


def test_the_checker_catches_a_readmit_from_an_unfinished_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Break the owner CAS (re-admit regardless of the attempt): the resume check fires."""
    from runtime.adapters.memory.waits import WaitsMixin

    async def blind(self: WaitsMixin, run_id: Any, attempt_id: Any, now: Any) -> Any:
        run = self.run_table.get(run_id)
        if run is None or run.status is not RunStatus.AWAITING_SERVICE:
            return None
        return self._readmit(run, now)

    async def eager(engine: Any, run: Any) -> Any:
        deps = engine.deps
        if run.status is not RunStatus.AWAITING_SERVICE or run.service_attempt_id is None:
            return None
        delivery = await deps.ledger.readmit_after_service(run.id, run.service_attempt_id,
                                                           deps.clock.now())
        return None if delivery is None else await engine.publish(delivery)

    monkeypatch.setattr(WaitsMixin, "readmit_after_service", blind)
    monkeypatch.setattr("runtime.recovery.relay.refresh_service", eager)
    result = run_simulation(1, window_scenario("service_call"), "calm")
    assert result.invariant == "resume_reads_decided_owner", result.violation
