"""The checker catches each test-only fence break (sim.breaks)."""

from __future__ import annotations

import json

import pytest

from sim.kernel import run_simulation


def _first_violation(
    scenario: str, break_name: str, seeds: range, invariant: str | None = None
) -> tuple[int, str, str]:
    """The first seed whose run violates `invariant` (any invariant when None)."""
    for seed in seeds:
        result = run_simulation(seed, scenario, "swarm", break_name=break_name)
        v = result.violation
        if v is not None and invariant in (None, v.invariant):
            return seed, v.invariant, v.message
    raise AssertionError(f"{break_name} went unnoticed over {seeds}")


def test_cancellation_without_containment_is_caught() -> None:
    seed, invariant, message = _first_violation("cancel", "no_containment", range(1, 60))
    assert invariant == "cancelled_after_containment"
    assert "CANCELLED while" in message or "CANCELLED with consent" in message
    again = run_simulation(seed, "cancel", "swarm", break_name="no_containment")
    assert again.invariant == invariant  # the replay reproduces it


def test_the_same_seeds_hold_with_containment() -> None:
    seed, _, _ = _first_violation("cancel", "no_containment", range(1, 60))
    assert run_simulation(seed, "cancel", "swarm").ok


def test_rotating_a_pre_boot_job_without_fencing_is_caught() -> None:
    seed, invariant, _ = _first_violation("crashloop", "orphan_fence", range(1, 120),
                                          "fenced_before_rotation")
    assert invariant == "fenced_before_rotation"
    trace = run_simulation(seed, "crashloop", "swarm", break_name="orphan_fence").trace_lines
    assert any(json.loads(line)["event"] == "boot.crash" for line in trace)


def test_a_checkpoint_deletion_that_aborts_startup_is_caught() -> None:
    """Seed 000: cleanup failure cannot conceal terminal truth nor block startup."""
    seed, _, message = _first_violation("crashloop", "cleanup_blocks_startup",
                                        range(1, 101), "cleanup_never_blocks")
    assert "could not be deleted" in message
    trace = run_simulation(seed, "crashloop", "swarm",
                           break_name="cleanup_blocks_startup").trace_lines
    failed = [json.loads(line) for line in trace if '"startup.failed"' in line]
    assert failed and failed[-1]["data"].get("cleanup") is True
    assert run_simulation(seed, "crashloop", "swarm").ok  # the guarded cleanup holds


def test_a_late_job_left_queued_behind_a_cancellation_is_caught() -> None:
    """Seed 000, the publisher that loses its acknowledgement after cancellation:
    a swarm campaign of `cancel` (publishes in flight) catches a publisher that
    never fences the job landing behind the canceller's parent probe."""
    seed, invariant, message = _first_violation("cancel", "late_job_left_queued",
                                                range(1, 101), "late_job_fenced")
    assert "landed behind its Run's cancellation and was never aborted" in message
    again = run_simulation(seed, "cancel", "swarm", break_name="late_job_left_queued")
    assert again.invariant == invariant  # the replay reproduces it
    fixed = run_simulation(seed, "cancel", "swarm")
    assert fixed.ok, fixed.violation
    assert fixed.world is not None and fixed.world.checker.late_jobs  # the window was reached


def test_a_cancelled_publisher_that_skips_the_fence_is_caught() -> None:
    """Seed 000, the publisher that loses its acknowledgement after cancellation, in
    the window ACK_IN_FLIGHT opens: `shutdown_in_flight` stops the Vessel while a late
    job's acknowledgement is still in flight, and a publisher that does not fence when
    its own cancellation arrives there leaves the job to the broker."""
    seed, invariant, message = _first_violation(
        "shutdown_in_flight", "cancelled_publisher_unfenced", range(1, 31), "late_job_fenced")
    assert "landed behind its Run's cancellation and was never aborted" in message
    broken = run_simulation(seed, "shutdown_in_flight", "swarm",
                            break_name="cancelled_publisher_unfenced")
    assert broken.invariant == invariant  # the replay reproduces it
    lines = [json.loads(line) for line in broken.trace_lines]
    assert any(r["event"] == "fault.fired" and r["data"]["fault"] == "ack_in_flight"
               for r in lines)
    fixed = run_simulation(seed, "shutdown_in_flight", "swarm")
    assert fixed.ok, fixed.violation
    assert fixed.world is not None and fixed.world.checker.late_jobs  # the window was reached
    assert _aborted_while_stopping(fixed.trace_lines) & set(fixed.world.checker.late_jobs)


def _aborted_while_stopping(trace_lines: list[str]) -> set[str]:
    """Hop keys sent an abort between a boot's boot.stopping and its boot.stopped:
    the shutdown's cancelled publishers fencing their late jobs themselves."""
    keys: set[str] = set()
    stopping = False
    for line in trace_lines:
        record = json.loads(line)
        if record["event"] in ("boot.stopping", "boot.stopped"):
            stopping = record["event"] == "boot.stopping"
        elif record["event"] == "job.abort" and stopping:
            keys.add(record["data"]["key"])
    return keys


def test_acks_in_flight_off_leave_a_publish_as_it_was() -> None:
    """ACK_IN_FLIGHT draws nothing while its probability is zero: `cancel` (which never
    turns it on) fires no broker.publish.ack fault and counts no hit of that point."""
    result = run_simulation(3, "cancel", "swarm")
    assert result.world is not None
    assert "broker.publish.ack" not in result.world.injector.coverage.hits


def test_a_failed_heartbeat_touch_leaves_the_hop_running() -> None:
    """TOUCH_FAIL (hardware's long hops): seed 5 fails touches of a live hop and every
    hop still ends with an outcome (hop.outcome); a scenario that never turns the kind
    on draws nothing at broker.touch."""
    result = run_simulation(5, "hardware", "swarm")
    assert result.world is not None and result.ok
    assert result.world.injector.coverage.kinds["touch_fail"] > 0
    calm = run_simulation(3, "cancel", "swarm")
    assert calm.world is not None
    assert "broker.touch" not in calm.world.injector.coverage.hits


# -- seed 000 conformance (issue M12) --------------------------------------------------


def test_parking_a_window_whose_snapshot_binds_another_run_is_caught() -> None:
    """prepark_any_run: startup's pre-park window ignores the snapshot's Run id; a
    misdirected checkpoint write makes such documents, and the park is seen."""
    seed, _, message = _first_violation("misfiled_stasis", "prepark_any_run",
                                                range(1, 30), "prepark_binds_run")
    assert "over a snapshot of Run" in message
    assert run_simulation(seed, "misfiled_stasis", "swarm").ok  # the fix holds there


def test_a_reread_cancel_that_leaves_the_terminal_step_missing_is_caught() -> None:
    """reread_skips_evidence: a re-read of a CANCELLED Run sweeps but leaves its
    missing terminal Step to the relay."""
    seed, _, message = _first_violation("cancel", "reread_skips_evidence", range(1, 101),
                                        "reread_repairs_evidence")
    assert "re-read CANCELLED without its terminal Step" in message
    assert run_simulation(seed, "cancel", "swarm").ok


def test_a_second_cancelled_step_teed_into_an_attached_hop_writer_is_caught() -> None:
    """duplicate_cancelled_step: the canceller writes run.cancelled and then tees the
    terminal event into the Step writer of a hop whose swept job still runs."""
    seed, _, message = _first_violation("skewed_sweep", "duplicate_cancelled_step",
                                        range(1, 20), "terminal_step_at_most_once")
    assert "(run.cancelled, run.cancelled)" in message
    assert run_simulation(seed, "skewed_sweep", "swarm").ok


def test_a_hop_that_gives_up_on_a_database_blip_is_caught() -> None:
    """Issue M11: the count-based retry bound (about 1.5 s) let a database
    restart end a hop: its Run FAILED by the blip, or left RUNNING when the
    settlement gave up too. Ledger outages in swarm make it observable."""
    seed, invariant, _ = _first_violation("basic", "short_ledger_retry", range(1, 70))
    assert invariant in ("retry_outlasts_blip", "transient_never_fails_a_run", "liveness")
    assert run_simulation(seed, "basic", "swarm").ok  # the same seed holds with the bound


def test_a_retry_that_does_not_back_off_is_caught() -> None:
    """retry_backoff reads each attempt's timing: a retry at once after a
    transient error (no backoff) is caught where it first happens."""
    seed, invariant, message = _first_violation("basic", "lazy_ledger_retry", range(1, 10))
    assert invariant == "retry_backoff" and "waited 0 s after failure 1" in message
    assert run_simulation(seed, "basic", "swarm").ok


def test_the_retry_watch_sees_the_retries_it_judges() -> None:
    """The retry invariants are not vacuous: seed 1 of basic retries ledger calls,
    the watch records every attempt of each, and the unbroken runtime holds."""
    from sim import retry_checks

    judged: list[int] = []
    original = retry_checks.RetryChecks.judge

    def counting(self: retry_checks.RetryChecks, record: retry_checks.CallRecord,
                 gave_up: bool) -> None:
        judged.append(len(record.attempts))
        original(self, record, gave_up)

    retry_checks.RetryChecks.judge = counting  # type: ignore[method-assign]
    try:
        result = run_simulation(1, "basic", "swarm")
    finally:
        retry_checks.RetryChecks.judge = original  # type: ignore[method-assign]
    assert result.ok
    assert max(judged) > 1, "seed 1 of basic retried no ledger call"


def test_an_effect_after_a_cancel_at_claim_is_caught() -> None:
    """cancel_at_claim pauses a hop right after its claim while the operator's
    cancel commits CANCELLING: an effect that does not re-check the claim is
    applied for a cancelling Run. The plain cancel scenario never shows it."""
    seed, invariant, message = _first_violation("cancel_at_claim", "effect_ignores_cancelling",
                                                range(1, 10))
    assert invariant == "effect_under_claim" and "without the claim" in message
    assert run_simulation(seed, "cancel_at_claim", "swarm").ok
    trace = run_simulation(seed, "cancel_at_claim", "swarm").trace_lines
    assert any('"cancel"' in line and '"operator"' in line for line in trace)


def test_a_hop_that_misreports_or_raises_is_caught() -> None:
    """The broker (SAQ keeps it as the job's result) learns a hop's outcome from the
    handler: a lost claim reported as settled, or a park whose evidence raises out
    of the hop, are caught where no durable record of the Run looks wrong."""
    seed, invariant, message = _first_violation("basic", "claim_reports_won", range(1, 20))
    assert invariant == "hop_outcome_truthful" and "returned settled after claim=False" in message
    assert run_simulation(seed, "basic", "swarm").ok
    seed, invariant, message = _first_violation("consent", "park_escapes_hop", range(1, 10))
    assert invariant == "hop_ends_with_an_outcome" and "RuntimeError" in message
    assert run_simulation(seed, "consent", "swarm").ok


def test_a_service_store_blip_never_fails_a_run() -> None:
    """Issue M11: a transient error of the service attempt store during the hop
    (prepare, or the resumed hop's read) failed the Run; found by the
    transient_never_fails_a_run invariant on service_wait seeds 2-5."""
    hit = []
    for seed in range(1, 11):
        result = run_simulation(seed, "service_wait", "swarm")
        assert result.ok, (seed, result.violation)
        if any(pf.fault.value in ("ledger_transient", "ledger_ambiguous")
               and getattr(pf.trigger, "point", "").startswith("service.")
               for pf in result.fired.faults):
            hit.append(seed)
    assert len(hit) >= 3, f"only seeds {hit} of 1-10 injected a service store fault"


def test_a_break_of_an_inherited_method_leaves_the_class_as_it_was() -> None:
    """sim.breaks restores an inherited method by removing its patch: copying the
    base's function onto the subclass would shadow later patches of the base
    (test_service_waits patched WaitsMixin after service_resumed_unfinished ran)."""
    from runtime.adapters.memory import MemoryLedger
    from sim.breaks import broken

    assert "readmit_after_service" not in vars(MemoryLedger)
    with broken("service_resumed_unfinished"):
        assert "readmit_after_service" in vars(MemoryLedger)
    assert "readmit_after_service" not in vars(MemoryLedger)


def test_a_quarantined_scenario_runs_by_name_but_not_in_all() -> None:
    """A scenario that exposes a known, unfixed gap stays out of `all` campaigns,
    with its reason, yet replays and breaks still reach it by name."""
    from sim.scenarios import SCENARIOS, Scenario, basic, resolve

    resolve("all")  # the built-in scenarios are registered
    held = Scenario("held_back", "a synthetic scenario", basic.BASIC.drive, basic.BASIC.heal,
                    quarantined="a known gap, not yet fixed")
    SCENARIOS[held.name] = held
    try:
        names = [s.name for s in resolve("all")]
        assert "held_back" not in names and "cancel" in names
        assert [s.name for s in resolve("held_back")] == ["held_back"]
    finally:
        del SCENARIOS[held.name]


def test_a_late_transmission_is_a_known_containment_gap() -> None:
    """Quarantined `late_transmission`: a transmission that lands after a truthful
    absence lookup let a cancel settle the attempt CANCELLED starts a provider job
    behind CANCELLED (sim.work_checks on_provider_effect, service_cancel_contained).
    When the runtime or the driver contract closes the gap, this test changes and the
    scenario leaves quarantine."""
    from sim.scenarios import SCENARIOS, resolve

    resolve("all")
    assert SCENARIOS["late_transmission"].quarantined
    result = run_simulation(5, "late_transmission", "swarm")
    assert result.violation is not None
    assert result.violation.invariant == "service_cancel_contained"
    assert "after attempt" in result.violation.message


def test_skewed_sweep_is_back_in_all() -> None:
    """Its liveness gap is fixed (the relay recovers a hop of the live boot whose
    job a sweep aborted), so `all` campaigns and the gate run it again."""
    from sim.scenarios import SCENARIOS, resolve

    assert "skewed_sweep" in [s.name for s in resolve("all")]
    assert SCENARIOS["skewed_sweep"].quarantined is None


def test_a_relay_that_trusts_every_own_claim_leaves_swept_runs_live() -> None:
    """abandoned_hop_left_live: the relay's orphan pass as it was before the fix,
    every claim of this boot taken for a live hop. A Run whose job the skewed
    sweeper aborted, and that the operator left alone, never ends after heal."""
    seed, _, message = _first_violation("skewed_sweep", "abandoned_hop_left_live",
                                        range(1, 30), "liveness")
    assert "after heal" in message
    fixed = run_simulation(seed, "skewed_sweep", "swarm")
    assert fixed.ok, fixed.violation
    assert fixed.world is not None
    assert any('"tx.fail_abandoned"' in line and '"changed":true' in line
               for line in fixed.trace_lines)


def test_a_relay_that_fences_its_own_live_hops_is_caught_as_a_false_abandonment() -> None:
    """orphan_own_boot: the relay aborts the job of a hop this boot still runs; the
    hop dies and the Run fails as abandoned, but its job ended by a fence of the
    live boot, not by a sweep."""
    seed, _, message = _first_violation("crashloop", "orphan_own_boot", range(1, 20),
                                        "abandoned_only_after_sweep")
    assert "fenced: orphaned by process death" in message
    assert run_simulation(seed, "crashloop", "swarm").ok


@pytest.mark.parametrize(
    ("brk", "invariant", "caught", "refusal"),
    [
        # untrusted_start_fenced: startup takes an active row without a start time
        # for pre-boot and aborts it.
        ("untrusted_start_fenced", "live_hop_not_fenced",
         "whose start time it never saw", "without a trustworthy start time"),
        # degenerate_start_trusted: startup trusts a start time of 0.0 or inf (as a
        # START_UNRECORDED probe may show) and places the job by it.
        ("degenerate_start_trusted", "live_hop_not_fenced",
         "whose start time it never saw", "without a trustworthy start time"),
        # mismatch_passed_clean: a QUEUED Run whose delivery row reads CLAIMED,
        # SETTLED or FAILED is reported settled elsewhere and startup serves as clean.
        ("mismatch_passed_clean", "startup_degrades_honestly",
         "out of step with its QUEUED Run", "delivery row does not match"),
    ],
)
def test_a_degraded_startup_passed_as_clean_is_caught(
    brk: str, invariant: str, caught: str, refusal: str
) -> None:
    """Each degraded-startup break is caught by its invariant, and on the same seed
    the correct build degrades: its strict startup refuses, naming the trigger."""
    seed, _, message = _first_violation("degraded_startup", brk, range(1, 20), invariant)
    assert caught in message
    fixed = run_simulation(seed, "degraded_startup", "swarm")
    assert fixed.ok, fixed.violation
    refused = [line for line in fixed.trace_lines if '"boot.refused"' in line]
    assert any(refusal in line for line in refused)


def test_strict_refusals_on_degraded_startups_stay_bounded() -> None:
    """Each start_unrecorded or delivery_drift fire can refuse one strict startup; the
    faults stop after max_startup_faults, so the world serves again and ends."""
    for seed in range(1, 6):
        result = run_simulation(seed, "degraded_startup", "swarm")
        assert result.ok, (seed, result.violation, result.error)
        kinds = result.coverage["kinds"]
        fired = kinds.get("start_unrecorded", 0) + kinds.get("delivery_drift", 0)
        refused = sum(1 for line in result.trace_lines
                      if '"boot.refused"' in line and "reconciliation degraded" in line)
        assert fired <= 3 and refused <= fired, (seed, fired, refused)
        assert result.boots < 60, (seed, result.boots)


def test_a_ledger_that_takes_a_second_terminal_step_is_caught() -> None:
    """second_terminal_step_written (issue 15, M11): two live boots fail the same
    orphan and both write its run.failed, as the two-Vessel soak found. With the
    ledger's one-terminal-Step guard the same race leaves one Step; without it
    the checker sees two."""
    seed, _, message = _first_violation("crashloop", "second_terminal_step_written",
                                        range(1, 20), "terminal_step_at_most_once")
    assert "(run.failed, run.failed)" in message
    from runtime.recovery import orphans
    from sim.breaks import BREAKS

    [(owner, attr, two_boots)] = BREAKS.companions["second_terminal_step_written"]
    assert (owner, attr) == (orphans, "write_or_owe")
    original = orphans.write_or_owe
    orphans.write_or_owe = two_boots  # the race alone, the guard in place
    try:
        raced = run_simulation(seed, "crashloop", "swarm")
    finally:
        orphans.write_or_owe = original
    assert raced.ok, raced.violation
    assert run_simulation(seed, "crashloop", "swarm").ok


def test_a_recovery_that_waits_for_the_sweep_is_caught() -> None:
    """redelivery_waits_for_sweep (issue 15, M11 item 3): a dead boot's dequeued,
    never claimed job is only aborted and its Run waits minutes for the broker's
    heartbeat sweep. degraded_startup kills boots right after a dequeue."""
    seed, _, message = _first_violation("degraded_startup", "redelivery_waits_for_sweep",
                                        range(1, 20), "redelivered_promptly")
    assert "never claimed, was left for the sweep" in message
    fixed = run_simulation(seed, "degraded_startup", "swarm")
    assert fixed.ok, fixed.violation
    assert any('"job.retired"' in line for line in fixed.trace_lines)  # the path was taken


def test_a_session_fence_forgotten_in_engine_and_ledger_is_caught() -> None:
    """no_session_fence (issue 15, M11): the ledger refuses a second open Run of a
    session itself, so the break forgets the fence in both places (its companion
    patches the memory ledger's check); the checker then sees two open Runs."""
    broken = run_simulation(61, "basic", "swarm", break_name="no_session_fence")
    assert not broken.ok and broken.violation is not None
    assert broken.violation.invariant == "session_fence", broken.violation
    assert run_simulation(61, "basic", "swarm").ok


def test_a_hop_that_owes_evidence_before_its_terminal_truth_is_caught() -> None:
    """A parked hop owes no terminal Step (sim.debt_checks, debt_after_truth): the
    break records a debt from the claim on, so a consent park leaves one for a live Run."""
    seed, _, message = _first_violation("consent", "debt_before_truth", range(1, 20),
                                        "debt_after_truth")
    assert "AWAITING_CONSENT" in message
    assert run_simulation(seed, "consent", "swarm").ok


def test_a_cancel_that_leaves_the_run_s_channel_open_is_caught() -> None:
    """The canceller's terminal path ends the Run's live channel (sim.event_checks,
    cancel_closes_channel): the break writes the Step and forgets the channel."""
    seed, _, message = _first_violation("cancel", "channel_left_open_after_cancel",
                                        range(1, 20), "cancel_closes_channel")
    assert "still open" in message
    assert run_simulation(seed, "cancel", "swarm").ok


def test_a_session_fence_ahead_of_the_replay_lookup_is_caught() -> None:
    """An exact replay returns its Run while another Run of its session is open
    (sim.admission_checks, replay_before_fence): the break fences the session first."""
    seed, _, message = _first_violation("session_race", "session_fence_before_replay",
                                        range(1, 20), "replay_before_fence")
    assert "admitted before the call" in message
    assert run_simulation(seed, "session_race", "swarm").ok


def test_a_hop_that_leaves_its_writer_attached_is_caught() -> None:
    """A parked Run's open channel tees to nobody (sim.event_checks, tee_to_live_writer):
    the break's hops leave without detaching their Step writer."""
    seed, _, message = _first_violation("consent", "writer_left_attached", range(1, 20),
                                        "tee_to_live_writer")
    assert "hop that left" in message
    assert run_simulation(seed, "consent", "swarm").ok


def test_a_close_that_leaves_its_readers_attached_is_caught() -> None:
    """A dropped channel holds no reader (sim.event_checks, dropped_channel_unread):
    the break's close does nothing, so the bus drops channels with readers on them."""
    seed, _, message = _first_violation("events", "close_is_a_no_op", range(1, 20),
                                        "dropped_channel_unread")
    assert "still attached" in message
    assert run_simulation(seed, "events", "swarm").ok


def test_a_close_that_misses_its_last_reader_leaving_is_caught() -> None:
    """A close waiting for readers ends when the last one leaves (sim.event_checks,
    close_ends_when_drained): the break's readers leave without signalling it."""
    seed, _, message = _first_violation("events", "reader_leaves_unsignalled", range(1, 20),
                                        "close_ends_when_drained")
    assert "no reader left" in message
    assert run_simulation(seed, "events", "swarm").ok


def test_a_group_commit_that_takes_one_step_is_caught() -> None:
    """A batching writer's append carries every Step queued in its generation
    (sim.event_checks, group_takes_queued): the break's group take stops at one."""
    seed, _, message = _first_violation("events", "group_of_one", range(1, 20),
                                        "group_takes_queued")
    assert "of the same generation queued" in message
    assert run_simulation(seed, "events", "swarm").ok


def test_an_errands_run_that_goes_round_again_is_caught() -> None:
    """An errands Run stops after the rounds it asked for (sim.stasis_checks,
    errands_bounded): the break's last round loops back, so the Run owns one job too
    many before it is cancelled; the same seed holds unbroken."""
    seed, _, message = _first_violation("cancel_children", "errands_past_rounds", range(1, 10),
                                        "errands_bounded")
    assert "rounds but owns" in message
    assert run_simulation(seed, "cancel_children", "swarm").ok


def test_a_release_that_renumbers_a_pattern_is_caught() -> None:
    """A Run DONE ran the version this release ships (sim.outcome_checks,
    done_on_released_pin): the break registers chatty one version down, so its Runs
    pin and finish chatty@0; the same seed holds unbroken."""
    seed, _, message = _first_violation("runtime_mutation", "chatty_renumbered",
                                        range(1, 4), "done_on_released_pin")
    assert "pinned to chatty@0; this release ships chatty@1" in message
    assert run_simulation(seed, "runtime_mutation", "swarm").ok


def test_an_errands_run_that_stops_after_one_round_is_caught() -> None:
    """An errands Run DONE went all its rounds, the declared default of 2 when it named
    none (sim.stasis_checks, errands_complete): the break ends every errands Run after
    its first round; the same seed holds unbroken."""
    seed, _, message = _first_violation("cancel_children", "errands_stop_early",
                                        range(1, 10), "errands_complete")
    assert "is DONE after" in message and "owning 1 agent jobs" in message
    assert run_simulation(seed, "cancel_children", "swarm").ok


def test_a_resume_that_refuses_its_own_snapshot_is_caught() -> None:
    """A resumed hop reads the checkpoint its own Run saved (sim.stasis_checks,
    stasis_kept): the break fails every resumed graph Run as stasis lost, which no
    misfiled write excuses in consent; the same seed holds unbroken."""
    seed, _, message = _first_violation("consent", "resume_refuses_own_snapshot",
                                        range(1, 4), "stasis_kept")
    assert "failed as 'stasis lost'" in message
    assert run_simulation(seed, "consent", "swarm").ok


def test_a_worker_that_stages_what_the_model_did_not_say_is_caught() -> None:
    """A staged interpretation is the model's reply (sim.work_checks,
    interpretation_is_reply): the break drops every reply's `needs`, so a job the
    model said waits on a dependency is staged published; the same seed holds unbroken."""
    seed, _, message = _first_violation("leased_jobs", "needs_ignored", range(1, 4),
                                        "interpretation_is_reply")
    assert "is published" in message and "the model's reply gives waiting_" in message
    assert run_simulation(seed, "leased_jobs", "swarm").ok


@pytest.mark.parametrize(("break_name", "words"), [
    ("malformed_output_staged", "the output was staged"),
    ("invalid_output_retried", "jobs.schedule_retry"),
    ("invalid_output_abandoned", "ended without failing the job"),
])
def test_a_worker_that_does_not_fail_a_malformed_reply_is_caught(break_name: str,
                                                                  words: str) -> None:
    """A model output that is not a bundle fails its job as invalid output
    (sim.work_checks, malformed_reply_failed): a validator that mends it and stages it,
    a worker that retries it, and one that drops it and leaves the attempt open are each
    caught; the same seed holds unbroken."""
    seed, _, message = _first_violation("leased_jobs", break_name, range(1, 4),
                                        "malformed_reply_failed")
    assert "malformed output" in message and words in message
    assert run_simulation(seed, "leased_jobs", "swarm").ok


def test_a_gate_whose_approved_effect_never_lands_is_caught() -> None:
    """A consent gate must act on the durable verdict: a DONE gate whose APPROVED
    round applied nothing (as when its verdict test is read backwards) is caught,
    and the same seed holds unbroken."""
    seed, invariant, message = _first_violation("consent", "gate_effect_skipped", range(1, 6))
    assert invariant == "gate_effects_follow_verdicts"
    assert "APPROVED" in message and "applied []" in message
    assert run_simulation(seed, "consent", "swarm").ok


def test_a_verdict_that_lost_the_race_answered_as_decided_is_caught() -> None:
    """Of two verdicts racing one consent (the consent scenario's two screens) the
    CAS's loser is refused (sim.stasis_checks, verdict_honoured): the break's CAS
    answers with the verdict asked for, so the loser reads as decided; the same seed
    holds unbroken."""
    seed, _, message = _first_violation("consent", "verdict_answered_as_asked", range(1, 6),
                                        "verdict_honoured")
    assert "answered decided but the consent is" in message
    assert run_simulation(seed, "consent", "swarm").ok


def test_an_attempt_event_of_interpretation_zero_taken_is_caught() -> None:
    """Interpretations count from 1 (sim.input_checks, bad_input_refused): the break's
    attempt event admits interpretation 0, so the client's record decodes; the same
    seed holds unbroken."""
    seed, _, message = _first_violation("bad_input", "interpretation_from_zero", range(1, 4),
                                        "bad_input_refused")
    assert "attempt_event.decode" in message
    assert run_simulation(seed, "bad_input", "swarm").ok


def test_a_negative_retry_base_taken_is_caught() -> None:
    """A retry backoff is never negative (sim.input_checks, bad_input_refused): the
    break's job policy admits a retry base down to -1, so the client's policy with a
    negative base decodes; the same seed holds unbroken."""
    seed, _, message = _first_violation("bad_input", "retry_base_negative", range(1, 4),
                                        "bad_input_refused")
    assert "job_policy.decode" in message
    assert run_simulation(seed, "bad_input", "swarm").ok


def test_a_newer_model_version_taken_as_the_same_job_is_caught() -> None:
    """A job id names one model version (sim.work_checks, receipt_idempotent): the
    break compares versions by order, so the client's receipt of an acknowledged job
    under a newer version is taken as the stored job; the same seed holds unbroken."""
    seed, _, message = _first_violation("bad_input", "receipt_takes_newer_version",
                                        range(1, 4), "receipt_idempotent")
    assert "a version receipt" in message
    assert run_simulation(seed, "bad_input", "swarm").ok


def test_a_repeated_closing_refused_is_caught_where_closings_repeat() -> None:
    """ambiguous_closes loses the answer of most store writes, so workers repeat
    closings that committed (sim.work_checks, lease_honoured): the break refuses every
    repeat as AttemptClosed; the same seed holds unbroken."""
    seed, _, message = _first_violation("ambiguous_closes", "repeat_closing_refused",
                                        range(1, 4), "lease_honoured")
    assert seed == 1 and "repeats the very closing" in message
    assert run_simulation(seed, "ambiguous_closes", "swarm").ok


def test_a_withdrawal_that_misnumbers_its_failure_is_caught() -> None:
    """A withdrawal of a job whose lease lapsed records the expired lease, then the
    failure, numbered in log order (sim.work_checks, attempt_log_numbered): the break
    gives both the log's length; the same seed holds unbroken."""
    seed, _, message = _first_violation("withdrawn_jobs", "withdraw_numbered_from_start",
                                        range(1, 4), "attempt_log_numbered")
    assert "attempt events are numbered" in message
    assert run_simulation(seed, "withdrawn_jobs", "swarm").ok


def test_a_resubmit_refused_for_a_known_provider_job_is_caught() -> None:
    """A worker acting on an old "unknown" lookup answer after others recorded the
    provider job and found it gone meets an INDETERMINATE attempt holding that job: a
    same-key replay proof re-submits it (sim.work_checks, service_resubmit_honoured).
    The break refuses it, as the surviving mutant of rules.py:108 did; the same seed
    holds unbroken."""
    seed, _, message = _first_violation("resubmit_race", "replay_refused_with_job",
                                        range(1, 8), "service_resubmit_honoured")
    assert "provider job" in message and "same_key_replay" in message and "refused" in message
    assert run_simulation(seed, "resubmit_race", "swarm").ok


def test_a_linger_that_outlasts_a_barrier_is_caught() -> None:
    """A barrier ends a Step writer's linger (sim.event_checks, barrier_ends_linger): the
    break's linger ignores a lone barrier, so a parking hop's flush waits it out."""
    seed, _, message = _first_violation("consent_batched", "barrier_left_lingering",
                                        range(1, 20), "barrier_ends_linger")
    assert "barrier(s) wait on it" in message
    assert run_simulation(seed, "consent_batched", "swarm").ok


def test_a_linger_over_a_full_group_is_caught() -> None:
    """A full group ends a Step writer's linger however the queue passed the group limit
    (sim.writer_checks, full_group_not_held): the break hurries only at exactly 64
    queued, so a writer back from a stalled append with more queued holds them."""
    seed, _, message = _first_violation("step_burst", "full_group_left_lingering",
                                        range(1, 10), "full_group_not_held")
    assert "lingered over a full group" in message
    assert run_simulation(seed, "step_burst", "swarm").ok


def test_steps_given_back_without_their_metadata_are_caught() -> None:
    """A fenced settlement's Steps come back to the writer as they were taken
    (sim.writer_checks, restored_steps_first): the break gives back their kinds with
    empty metadata."""
    seed, _, message = _first_violation("step_burst", "restore_without_metadata",
                                        range(1, 10), "restored_steps_first")
    assert "comes back first" in message
    assert run_simulation(seed, "step_burst", "swarm").ok


def test_a_reader_reported_cut_off_without_a_close_is_caught() -> None:
    """Cut off means the channel closed before the reader took the terminal event
    (sim.event_checks, cut_off_honest): the break's readers start out cut off."""
    seed, _, message = _first_violation("events", "reader_born_cut_off", range(1, 20),
                                        "cut_off_honest")
    assert "reported cut off" in message
    assert run_simulation(seed, "events", "swarm").ok


def test_a_boundary_two_before_the_terminal_event_is_caught() -> None:
    """A resync taken after the terminal event sits just before it (subscriber_order):
    the break's boundary lands two cursors before it, so the stream skips one."""
    seed, _, message = _first_violation("events", "boundary_two_before_terminal",
                                        range(1, 20), "subscriber_order")
    assert "saw cursor" in message
    assert run_simulation(seed, "events", "swarm").ok


def test_a_settle_that_keeps_its_checkpoint_is_caught() -> None:
    """A settling hop deletes its Run's checkpoint (a failed deletion is a debt): a
    worker that skips the deletion of a resumed Run is caught, and the seed holds
    unbroken."""
    seed, invariant, message = _first_violation("crashloop", "settle_keeps_checkpoint",
                                                range(1, 6))
    assert invariant == "settled_hop_releases_checkpoint"
    assert "left its checkpoint" in message
    assert run_simulation(seed, "crashloop", "swarm").ok


def test_a_hop_that_drops_its_token_deltas_is_caught() -> None:
    """Token deltas are live-only, so only the Run's channel can show them: a hop
    whose tokens never reach it, though its node reports them spoken, is caught as it
    settles, and the seed holds unbroken."""
    seed, invariant, message = _first_violation("runtime_mutation", "token_deltas_dropped",
                                                range(1, 6))
    assert invariant == "chatty_tokens_spell_result"
    assert "0 held" in message
    assert run_simulation(seed, "runtime_mutation", "swarm").ok


def test_a_replay_that_republishes_a_claimed_hop_is_caught() -> None:
    """A publisher hands the broker only a hop it read PENDING or PUBLISHED: a replayed
    admission that publishes the hop it found claimed is caught as it calls the broker,
    and the seed holds unbroken."""
    seed, invariant, message = _first_violation("admission_race", "replay_republishes_claimed",
                                                range(1, 6))
    assert invariant == "publish_open_hop"
    assert "read CLAIMED" in message
    assert run_simulation(seed, "admission_race", "swarm").ok


def test_a_channel_counting_from_two_or_misreporting_its_window_is_caught() -> None:
    """A channel's replay holds consecutive cursors from 1 and reports that span
    (sim.event_checks, replay_window_honest): one break starts the cursors at 2, the
    other reports a window one event short."""
    for name, shown in (("first_cursor_two", "cursors (2,)"), ("replay_window_short", "window")):
        seed, _, message = _first_violation("events", name, range(1, 10), "replay_window_honest")
        assert shown in message
        assert run_simulation(seed, "events", "swarm").ok


def test_a_reader_displacing_another_is_caught() -> None:
    """Each accepted reader joins its channel beside the others (sim.event_checks,
    reader_registered): the break registers every reader under one key."""
    seed, _, message = _first_violation("events", "reader_keys_reused", range(1, 10),
                                        "reader_registered")
    assert "now has" in message
    assert run_simulation(seed, "events", "swarm").ok


def test_a_reader_queue_full_one_event_early_is_caught() -> None:
    """A stalled reader holds up to 256 undelivered events (sim.event_checks,
    reader_queue_bound): the break's queue counts itself full at 255, so the 256th
    event becomes a resync boundary; long_stream's runtime-sized channels show it."""
    seed, _, message = _first_violation("long_stream", "reader_queue_one_short", range(1, 20),
                                        "reader_queue_bound")
    assert "256 event(s) behind" in message and "owed all 256" in message
    assert run_simulation(seed, "long_stream", "swarm").ok


def test_long_stream_passes_the_runtime_s_own_bounds() -> None:
    """long_stream's streams outgrow 256 events: watched readers fall behind a full
    queue (a fell_behind resync), edge readers subscribe with a backlog of exactly 256,
    and readers reconnect past cursor 256 once they took the terminal event."""
    import json

    result = run_simulation(1, "long_stream", "swarm")
    assert result.ok, result.violation
    events = [json.loads(line) for line in result.trace_lines if '"sub.event"' in line]
    assert max(e["data"]["cursor"] for e in events) > 256
    assert any(e["data"]["kind"] == "resync" and "watched" in e["data"]["sub"]
               for e in events)


def test_a_writer_that_never_lingers_is_caught() -> None:
    """A group-committing writer holds a group for its linger unless hurried
    (sim.writer_checks, linger_holds): the break's writer appends each Step at once."""
    seed, _, message = _first_violation("events", "writer_never_lingers", range(1, 10),
                                        "linger_holds")
    assert "inside its 0.05 s linger" in message
    assert run_simulation(seed, "events", "swarm").ok


def test_a_writer_that_lingers_too_long_is_caught() -> None:
    """A group-committing writer holds Steps queued behind an append at most the designed
    50 ms (sim.writer_checks, linger_bounded): the break's writer lingers twenty times
    as long, as a linger constant raised to 1.05 s would."""
    seed, _, message = _first_violation("step_burst", "writer_lingers_long", range(1, 10),
                                        "linger_bounded")
    assert "longer than the designed 0.05 s linger" in message
    assert run_simulation(seed, "step_burst", "swarm").ok


def test_a_fold_that_does_not_wait_for_the_append_in_flight_is_caught() -> None:
    """A settling hop waits up to 1 s for its writer's append in flight before it
    settles alone (sim.writer_checks, settle_folds_steps): the break's hop never waits."""
    seed, _, message = _first_violation("basic", "fold_without_waiting", range(1, 10),
                                        "settle_folds_steps")
    assert "settles alone while its writer's appends have kept it busy" in message
    assert run_simulation(seed, "basic", "swarm").ok


def test_a_bus_that_keeps_closed_channels_is_caught() -> None:
    """A channel's owner closes it through the bus, which discards it at once
    (sim.event_checks, closed_channel_discarded): the break's bus never discards."""
    seed, _, message = _first_violation("events", "channel_never_discarded", range(1, 10),
                                        "closed_channel_discarded")
    assert "still holds the closed channel" in message
    assert run_simulation(seed, "events", "swarm").ok


def test_a_supervisor_backoff_that_does_not_double_is_caught() -> None:
    """The relay supervisor's backoff doubles from 0.1 s up to 5 s (sim.relay_checks,
    relay_restarted_on_backoff): the break's restarts all wait 0.1 s."""
    seed, _, message = _first_violation("relay_bugs", "relay_backoff_flat", range(1, 10),
                                        "relay_restarted_on_backoff")
    assert "after its failure 2, not 5.2 s" in message
    assert run_simulation(seed, "relay_bugs", "swarm").ok


def test_a_relay_its_supervisor_leaves_dead_is_caught() -> None:
    """A relay that exits before shutdown is restarted (sim.relay_checks,
    relay_restarted_on_backoff): the break's supervisor runs its relay once."""
    seed, _, message = _first_violation("relay_bugs", "relay_left_dead", range(1, 10),
                                        "relay_restarted_on_backoff")
    assert "was not restarted" in message
    assert run_simulation(seed, "relay_bugs", "swarm").ok


def test_a_settling_hop_that_flushes_its_lingering_writer_is_caught() -> None:
    """What a lingering writer holds rides in the settlement (sim.writer_checks,
    settle_folds_steps): the break's fold flushes the writer with a barrier first."""
    seed, _, message = _first_violation("events", "fold_after_flush", range(1, 10),
                                        "settle_folds_steps")
    assert "flushed its lingering Step writer" in message
    assert run_simulation(seed, "events", "swarm").ok


def test_a_park_whose_run_moved_on_before_its_step_is_not_a_violation() -> None:
    """cancel_children seed 4 (default profile): a hop parks on a service attempt whose
    submit fails twice, the relay readmits the Run and a later hop claims it before the
    first hop publishes run.parked; that Step then has no writer of its hop to go to,
    which hop_outcome_truthful excuses as it excuses a Run already terminal."""
    result = run_simulation(4, "cancel_children", "default")
    assert result.ok, result.violation


def test_same_key_admissions_not_single_flighted_are_caught() -> None:
    """runtime/sessions.py: a process that stops locking the idempotency key runs two
    retention hooks of one Run at once (issue M9: the negated `key is None` survived)."""
    seed, _, message = _first_violation("admission_race", "admission_key_unlocked",
                                                range(1, 10), "admission_single_flight")
    assert "second retention hook" in message
    assert run_simulation(seed, "admission_race", "swarm").ok


def test_an_admission_that_pins_the_oldest_version_is_caught() -> None:
    """A rolling upgrade's newer engine must pin its newer echo and two_step (issue M9:
    `latest` reading the Pattern name as an order pinned another Pattern's version)."""
    seed, _, message = _first_violation("rolling_upgrade", "admission_pins_oldest",
                                        range(1, 10), "admission_pins_latest")
    assert "the registry's latest is" in message
    assert run_simulation(seed, "rolling_upgrade", "swarm").ok


def test_a_startup_that_reports_its_service_refires_backwards_is_caught() -> None:
    """runtime/recovery/reconcile.py: the negated `if await refresh_service(...)` (issue
    M9) lists the service waits startup left parked as refired and leaves out those it
    re-admitted (sim.startup_checks, startup_refired_true)."""
    seed, _, message = _first_violation("service_wait", "service_refire_inverted",
                                        range(1, 10), "startup_refired_true")
    assert "refired although its wait pass never re-admitted it" in message
    assert run_simulation(seed, "service_wait", "swarm").ok


def test_a_terminal_step_left_queued_past_cleanup_is_caught() -> None:
    """A terminal Step that did not ride in the settlement is written before the hop's
    checkpoint cleanup (sim.writer_checks, terminal_flush_before_cleanup): the break's
    hop never flushes it, leaving it to the writer's close."""
    seed, _, message = _first_violation("step_burst", "terminal_left_unflushed",
                                        range(1, 10), "terminal_flush_before_cleanup")
    assert "reached settle.evidence_written with" in message
    assert run_simulation(seed, "step_burst", "swarm").ok


def test_a_refused_terminal_publish_counted_as_published_is_caught() -> None:
    """A terminal publish that gave up at its bound (the writer's queue full behind a
    stalled append) leaves the terminal Step unwritten; a hop that counts it published
    owes no debt for it (sim.hop_checks, settled_hop_owes_evidence)."""
    seed, _, message = _first_violation("publish_bound", "refused_publish_accepted",
                                        range(1, 10), "settled_hop_owes_evidence")
    assert "owes no evidence debt" in message
    assert run_simulation(seed, "publish_bound", "swarm").ok


def test_an_unshielded_publish_losing_a_node_outcome_is_caught() -> None:
    """A graceful shutdown cancels a hop while its final node's node.completed publish
    waits on a full Step queue: unshielded, the hop ends before settling the node's
    outcome (sim.hop_checks, cancelled_hop_keeps_outcome)."""
    seed, _, message = _first_violation("publish_bound", "publish_unshielded",
                                        range(1, 10), "cancelled_hop_keeps_outcome")
    assert "without settling" in message
    assert run_simulation(seed, "publish_bound", "swarm").ok
