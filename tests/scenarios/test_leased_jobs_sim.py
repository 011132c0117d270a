"""The `leased_jobs` (seed 004) and `service` (seed 000, "Service job attempts")
scenarios: they hold over fixed seeds, every new fault kind has its effect,
and the checker catches test-only breaks of the fences they rely on."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from runtime import faults
from runtime.jobs.models import EventKind, JobState
from runtime.service import EvidenceKind, ServiceState
from sim.checker import INVARIANTS
from sim.faults.plan import AtPoint, FaultKind, FaultPlan, PlannedFault
from sim.kernel import SimResult, run_simulation
from sim.world import World

SEEDS = range(1, 16)
LEASED_KINDS = {"worker_crash", "worker_stall", "late_result", "model_hang", "model_reply_lost",
                "model_malformed"}
SERVICE_KINDS = {"worker_crash", "provider_duplicate", "lookup_lies", "service_ack_lost",
                 "service_timeout"}


def _world(result: SimResult) -> World:
    assert result.world is not None
    return result.world


def _planned(scenario: str, seed: int, point: str, kind: FaultKind, amount: float = 0.0,
             nth: int = 1) -> SimResult:
    """One fault at the `nth` hit of `point`, nothing else; it must fire and every
    invariant must hold."""
    fault = PlannedFault(trigger=AtPoint(point=point, nth=nth), fault=kind, amount=amount)
    result = run_simulation(seed, scenario, "calm", FaultPlan(faults=[fault]))
    assert result.coverage["kinds"] == {kind.value: 1}
    assert result.ok, (result.invariant, result.violation, result.error)
    return result


@pytest.mark.parametrize(("scenario", "kinds"), [("leased_jobs", LEASED_KINDS),
                                                 ("service", SERVICE_KINDS)])
def test_scenario_holds_over_fixed_swarm_seeds(scenario: str, kinds: set[str]) -> None:
    results = [run_simulation(seed, scenario, "swarm") for seed in SEEDS]
    assert [(r.seed, r.invariant, r.error) for r in results if not r.ok] == []
    assert all(r.runs > 0 and r.boots == 0 for r in results)  # work, and no Vessel boots
    fired: Counter[str] = Counter()
    for r in results:
        fired.update(r.coverage["kinds"])
    assert kinds <= set(fired), f"never fired: {sorted(kinds - set(fired))}"


def test_the_new_invariants_are_catalogued_with_their_seed() -> None:
    for name in ("fence_never_overwritten", "job_budgets", "evidence_kept",
                 "usage_never_fabricated", "job_liveness"):
        assert INVARIANTS[name].source.startswith("seed 004")
    for name in ("service_no_fabricated_failure", "service_single_effect",
                 "service_key_payload", "service_cancel_contained", "service_liveness"):
        assert INVARIANTS[name].source.startswith("seed 000")


def test_same_seed_same_trace_and_a_recorded_plan_replays_it() -> None:
    for scenario in ("leased_jobs", "service"):
        first = run_simulation(5, scenario, "swarm")
        assert run_simulation(5, scenario, "swarm").trace_hash == first.trace_hash
        assert first.fired.faults
        assert run_simulation(5, scenario, "swarm", first.fired).trace_hash == first.trace_hash


# -- leased jobs: each fault kind ---------------------------------------------------------


def test_a_late_result_from_an_old_fence_is_refused_and_its_usage_kept() -> None:
    world = _world(_planned("leased_jobs", 1, faults.JOB_INFERENCE_RETURNED,
                            FaultKind.LATE_RESULT, 200.0))
    refused = [e for events in world.jobs.event_log.values() for e in events
               if e.refused is not None]
    assert refused and all(e.kind is EventKind.COMPLETED and e.usage is not None
                           for e in refused)
    (job_id,) = {e.job_id for e in refused}
    (late,) = {e.fence for e in refused}
    # Only newer fences staged (the eager operator may have reprocessed the job while
    # the late result was in flight: then its usage keeps the interpretation of its call).
    # A job allowed one attempt is exhausted instead, and stages nothing at all.
    newer = world.jobs.interpretation_table.get(job_id, [])
    assert all(i.fence > late for i in newer)
    job = world.jobs.job_table[job_id]
    if newer:
        assert newer[-1].fence == job.fence
    else:
        assert job.state is JobState.EXHAUSTED
    assert {e.interpretation for e in refused} == {1}


def test_a_worker_stalled_past_its_lease_loses_the_job_to_another() -> None:
    world = _world(_planned("leased_jobs", 1, "jobs.reserve_model_call", FaultKind.WORKER_STALL,
                            200.0))
    (events,) = [e for e in world.jobs.event_log.values()
                 if any(x.kind is EventKind.EXPIRED_LEASE for x in e)]
    stalled = next(e.worker for e in events if e.kind is EventKind.EXPIRED_LEASE)
    staged = [e for e in events if e.kind is EventKind.COMPLETED]
    assert staged and staged[0].worker != stalled and staged[0].fence == 2


def test_a_hung_model_call_ends_at_the_deadline_with_unknown_usage() -> None:
    world = _world(_planned("leased_jobs", 1, "model.extract", FaultKind.MODEL_HANG))
    failed = [e for events in world.jobs.event_log.values() for e in events
              if e.kind is EventKind.FAILED and "deadline of 45 s" in e.detail]
    assert len(failed) == 1 and failed[0].usage is None
    assert [c.outcome for c in world.model.calls.values()].count("hung") == 1


def test_a_lost_model_reply_is_billed_but_recorded_as_unknown_not_zero() -> None:
    world = _world(_planned("leased_jobs", 1, "model.extract", FaultKind.MODEL_REPLY_LOST))
    (lost,) = [c for c in world.model.calls.values() if c.outcome == "lost"]
    assert lost.billed is not None and lost.returned is None
    failed = [e for events in world.jobs.event_log.values() for e in events
              if e.kind is EventKind.FAILED and "ConnectionResetError" in e.detail]
    assert len(failed) == 1 and failed[0].usage is None


@pytest.mark.parametrize("nth", range(1, 8))
def test_a_malformed_model_output_fails_its_job_and_stages_nothing(nth: int) -> None:
    world = _world(_planned("leased_jobs", 1, "model.extract", FaultKind.MODEL_MALFORMED,
                            nth=nth))
    (key,) = [k for k, c in world.model.calls.items() if c.malformed is not None]
    call = world.model.calls[key]
    assert call.outcome == "replied" and call.billed is not None
    job = world.jobs.job_table[key[0]]
    assert job.state is JobState.FAILED and job.error is not None
    assert job.error.startswith("invalid model output")
    assert job.evidence_id in world.jobs.evidence_table
    assert not [i for i in world.jobs.interpretation_table.get(job.id, [])
                if i.number == key[1]]
    (failed,) = [e for e in world.jobs.event_log[job.id] if e.kind is EventKind.FAILED]
    assert failed.usage == call.returned


def test_every_malformed_shape_is_refused_by_the_validator() -> None:
    from runtime.jobs.model import InvalidOutput, read_bundle
    from sim.leased import MALFORMED

    good = {"assertions": [{"subject": "s", "value": "v"}], "needs": "review"}
    read_bundle(good)
    assert len({name for name, _ in MALFORMED}) == len(MALFORMED) >= 7
    for _, rewrite in MALFORMED:
        with pytest.raises(InvalidOutput):
            read_bundle(rewrite(good))


def test_a_worker_crash_mid_call_keeps_the_budget_spent_and_the_evidence() -> None:
    result = _planned("leased_jobs", 1, "model.extract", FaultKind.WORKER_CRASH)
    world = _world(result)
    (crashed,) = [k for k, c in world.model.calls.items() if c.outcome == "crashed"]
    job = world.jobs.job_table[crashed[0]]
    assert job.evidence_id in world.jobs.evidence_table
    # The crashed call's interpretation: its call stays spent, the next attempt uses the
    # second and stages (an operator may have reprocessed the job later).
    first = [e for e in world.jobs.event_log[job.id] if e.interpretation == crashed[1]]
    assert [e.kind for e in first] == [EventKind.STARTED, EventKind.EXPIRED_LEASE,
                                       EventKind.STARTED, EventKind.COMPLETED]
    assert [e.call for e in first if e.kind is EventKind.STARTED] == [1, 2]
    assert first[-1].detail == "staged as published"
    assert any(json.loads(line)["event"] == "process.crash" for line in result.trace_lines)


def test_a_model_errors_usage_is_kept_when_its_retry_is_fenced_out() -> None:
    """Regression: the usage a retryable model error reported was dropped when the
    worker stalled past its lease and its schedule_retry was refused."""
    faults = [
        PlannedFault(trigger=AtPoint(point="model.extract", nth=1), fault=FaultKind.ACTOR_FAIL),
        PlannedFault(trigger=AtPoint(point="jobs.schedule_retry", nth=1),
                     fault=FaultKind.WORKER_STALL, amount=200.0),
    ]
    result = run_simulation(1, "leased_jobs", "calm", FaultPlan(faults=faults))
    assert result.ok, (result.invariant, result.violation, result.error)
    world = _world(result)
    (kept,) = [e for events in world.jobs.event_log.values() for e in events if e.refused]
    assert kept.kind is EventKind.FAILED and kept.usage is not None and kept.fence == 1


# -- service attempts: each fault kind -------------------------------------------------------


def _effects(world: World) -> dict[str, int]:
    return {key: len(jobs) for key, jobs in world.provider.by_key.items()}


def test_a_duplicated_submission_is_one_effect_at_a_replaying_provider() -> None:
    world = _world(_planned("service", 2, "service.driver.submit", FaultKind.PROVIDER_DUPLICATE))
    assert world.provider.replays_same_key
    assert len(world.provider.received) == sum(_effects(world).values()) + 1
    assert set(_effects(world).values()) == {1}


def test_a_lying_lookup_is_reconciled_once_it_tells_the_truth() -> None:
    world = _world(_planned("service", 2, "service.driver.lookup", FaultKind.LOOKUP_LIES, 200.0))
    (lied,) = [a for a in world.services.attempt_table.values()
               if any(e.kind is EvidenceKind.LOOKUP_ABSENT for e in a.evidence)]
    assert lied.state.terminal and lied.transmissions == 1
    assert set(_effects(world).values()) == {1}


@pytest.mark.parametrize(("kind", "evidence"), [
    (FaultKind.SERVICE_ACK_LOST, EvidenceKind.SUBMIT_ERROR),
    (FaultKind.SERVICE_TIMEOUT, EvidenceKind.SUBMIT_TIMEOUT),
])
def test_a_lost_or_late_acknowledgement_never_fabricates_failure(
    kind: FaultKind, evidence: EvidenceKind
) -> None:
    world = _world(_planned("service", 1, "service.driver.submit", kind))
    (attempt,) = [a for a in world.services.attempt_table.values()
                  if any(e.kind is evidence for e in a.evidence)]
    (job_id,) = world.provider.by_key[attempt.idempotency_key]
    job = world.provider.jobs[job_id]
    assert attempt.provider_job_id == job.job_id
    assert attempt.state.value == job.status.value.upper()  # the provider's truth, adopted
    assert attempt.transmissions == 1 and set(_effects(world).values()) == {1}


def test_a_crash_after_the_cas_to_submitting_never_resubmits_blindly() -> None:
    world = _world(_planned("service", 1, "service.begin_submit", FaultKind.WORKER_CRASH))
    assert not world.provider.lookup_proves_absence and not world.provider.replays_same_key
    # The crashed submit's attempt (and any a busy provider's slow refusal left without an
    # answer for a while): lookups found nothing and, without proof, none transmitted
    # again; each stays INDETERMINATE unless a cancel contained it or the refusal landed.
    unanswered = [a for a in world.services.attempt_table.values()
                  if a.evidence and a.evidence[0].kind is EvidenceKind.LOOKUP_ABSENT]
    assert any(a.state is not ServiceState.FAILED for a in unanswered)
    for stuck in unanswered:
        assert stuck.transmissions == 1
        assert stuck.idempotency_key not in world.provider.by_key  # contained: no effect
        kinds = [e.kind for e in stuck.evidence]
        if stuck.state is ServiceState.INDETERMINATE:
            assert kinds[-1] is EvidenceKind.LOOKUP_ABSENT
        elif stuck.state is ServiceState.CANCELLED:
            assert EvidenceKind.CANCEL_REQUESTED in kinds
            assert kinds[-1] is EvidenceKind.CANCEL_CONTAINED
        else:
            assert stuck.state is ServiceState.FAILED
            assert kinds[-1] is EvidenceKind.SUBMIT_REJECTED


def test_a_crash_before_the_provider_id_is_persisted_is_adopted_by_lookup() -> None:
    world = _world(_planned("service", 1, faults.SERVICE_SUBMITTED_BEFORE_ACK, FaultKind.CRASH))
    first = world.provider.jobs["prov-1"]
    attempt_id = world.services.key_index[first.key]
    attempt = world.services.attempt_table[attempt_id]
    assert attempt.provider_job_id == "prov-1" and attempt.transmissions == 1
    assert EvidenceKind.ACCEPTED not in [e.kind for e in attempt.evidence]
    assert EvidenceKind.LOOKUP_FOUND in [e.kind for e in attempt.evidence]


# -- the checker catches test-only breaks --------------------------------------------------


def _first_violation(scenario: str, break_name: str, seeds: range) -> SimResult:
    for seed in seeds:
        result = run_simulation(seed, scenario, "swarm", break_name=break_name)
        if result.violation is not None:
            return result
    raise AssertionError(f"{break_name} went unnoticed over {seeds}")


def test_staging_that_ignores_the_fence_is_caught() -> None:
    broken = _first_violation("leased_jobs", "stage_fence", range(1, 40))
    # The stale staging is refused nowhere: the decision itself is caught (lease_honoured
    # re-judges it from the job it found) before the overwritten interpretation is.
    assert broken.invariant == "lease_honoured"
    message = broken.violation.message  # type: ignore[union-attr]
    assert "jobs.stage" in message and "without the live lease" in message
    again = run_simulation(broken.seed, "leased_jobs", "swarm", break_name="stage_fence")
    assert again.trace_hash == broken.trace_hash
    assert run_simulation(broken.seed, "leased_jobs", "swarm").ok


def test_resubmitting_without_proof_is_caught() -> None:
    broken = _first_violation("service", "blind_resubmit", range(1, 60))
    assert broken.invariant == "service_single_effect"
    assert run_simulation(broken.seed, "service", "swarm").ok


def test_lapsed_lease_answers_arriving_as_the_lease_is_lost_keep_their_usage() -> None:
    """`lapsed_lease`: model calls outlive their lease (a renewal is refused while the call
    runs) and are cancelled; some answer at the very instant of that refusal, and their
    worker still hands the answer to the store, which refuses it there yet keeps its usage
    in the attempt log (seed 004, "Alpha.2 accounting")."""
    from datetime import timedelta

    from sim.clock import EPOCH

    result = run_simulation(1, "lapsed_lease", "calm")
    assert result.ok, (result.invariant, result.violation, result.error)
    events = [json.loads(line) for line in result.trace_lines]
    lost = {(e["data"]["job"], e["t"]) for e in events
            if e["event"] == "tx.renew" and e["data"].get("refused")}
    answered = [e for e in events if e["event"] in ("tx.stage", "tx.schedule_retry")
                and (e["data"]["job"], e["t"]) in lost]
    assert len(lost) > len(answered) > 0
    log = _world(result).jobs.event_log
    for e in answered:
        assert e["data"].get("refused")
        at = EPOCH + timedelta(seconds=e["t"])
        kept = [a for job, entries in log.items() if str(job) == e["data"]["job"]
                for a in entries if a.at == at and a.refused is not None]
        assert kept and all(a.usage is not None for a in kept), e


def test_bad_input_interpretation_records_are_refused_naming_the_bad_field() -> None:
    """`bad_input`: the client decodes interpretation records numbered 0 or under fence -1
    (seed 004: interpretations are numbered from 1, fences from 0); each fails validation
    naming that field."""
    result = run_simulation(1, "bad_input", "calm")
    assert result.ok, (result.invariant, result.violation, result.error)
    calls = [json.loads(line)["data"] for line in result.trace_lines
             if '"event":"bad_input.call"' in line]
    decoded = [c for c in calls if c["target"] == "interpretation.decode"]
    assert {tuple(c["fields"]) for c in decoded} == {("number",), ("fence",)}
    assert all(c["outcome"] == "ValidationError" and set(c["fields"]) <= set(c["named"])
               for c in decoded)


def test_a_cancel_settle_of_a_just_prepared_attempt_on_a_lookup_is_refused() -> None:
    """`bad_input`: the client settles an attempt it just prepared CANCELLED on a lookup;
    only proof that it was never submitted cancels a PREPARED attempt (seed 000 "Service
    job attempts"), and a lookup cancels no attempt in any state, so the refusal never
    depends on the service worker. The break takes the lookup as that proof."""
    result = run_simulation(1, "bad_input", "swarm")
    assert result.ok, (result.invariant, result.violation, result.error)
    calls = [json.loads(line)["data"] for line in result.trace_lines
             if '"event":"bad_input.call"' in line]
    settles = [c for c in calls if c["target"] == "service.settle.lookup_found"]
    assert settles and all(c["outcome"] == "IllegalTransition" for c in settles), settles
    broken = run_simulation(1, "bad_input", "swarm", break_name="lookup_cancels_prepared")
    assert broken.invariant in ("service_settle_honoured", "bad_input_refused"), broken.invariant
    assert broken.violation is not None and "lookup_found" in broken.violation.message


def test_a_forged_success_on_an_absent_lookup_is_refused() -> None:
    """`bad_input`: the client settles an open acknowledged attempt SUCCEEDED with a
    forged result on a lookup that found no job; only a lookup that found the job proves
    success (seed 000 "Service job attempts"). The break takes the absent lookup as proof."""
    result = run_simulation(1, "bad_input", "swarm")
    assert result.ok, (result.invariant, result.violation, result.error)
    calls = [json.loads(line)["data"] for line in result.trace_lines
             if '"event":"bad_input.call"' in line]
    settles = [c for c in calls if c["target"] == "service.settle.lookup_absent"]
    assert settles and all(c["outcome"] in ("IllegalTransition", "ServiceResultConflict")
                           for c in settles), settles
    broken = run_simulation(1, "bad_input", "swarm", break_name="absent_lookup_succeeds")
    assert broken.invariant in ("service_settle_honoured", "bad_input_refused"), broken.invariant
    assert broken.violation is not None and "lookup_absent" in broken.violation.message


def test_an_absent_lookup_says_truly_why_it_proves_nothing() -> None:
    """`service`: a lookup that finds no job leaves the attempt INDETERMINATE saying either
    that an acknowledged job was lost (only of an attempt with a provider job identity) or
    that absence is no proof (only under a provider that neither proves absence nor
    replays by key); the break says the first of an attempt never acknowledged."""
    broken = run_simulation(1, "service", "swarm", break_name="absence_claims_acknowledged_job")
    assert broken.invariant == "service_indeterminate_recorded"
    assert broken.violation is not None and "acknowledged job" in broken.violation.message
    assert run_simulation(1, "service", "swarm").ok
