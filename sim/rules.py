"""The rule catalogue: every checkable rule of the seeds, with its oracle (issue M9).

One entry per rule of seed 000_81a5c720b14d934a.txt (workers, run engine),
003_9b07f1601fdd86c6.txt (stasis) and 004_85033eb8fc772f12.txt (leased
jobs). Each names the checker invariants that enforce it (`sim.checker.INVARIANTS`),
the scenarios that exercise it (`sim.scenarios`), and at least one test-only
break (`sim.breaks.BREAKS`) that violates exactly that rule, with the scenario
and the first swarm seed known to catch it. A rule the simulator cannot observe
says why (`unobservable`) and names the real-process test that covers it
instead (`covered_by`, `path::test_name`): such a rule is listed, never
silently passing.

`gaps()` lists what is missing; `harness rules` prints the table and the gate
refuses to ship while any gap remains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

S000 = "000_81a5c720b14d934a.txt"
S003 = "003_9b07f1601fdd86c6.txt"
S004 = "004_85033eb8fc772f12.txt"

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class BreakRef:
    """A test-only break of the rule, the scenario it is caught in, and the first
    swarm seed known to catch it (a hint for fast tests; the gate measures afresh)."""

    name: str
    scenario: str
    seed: int = 1


@dataclass(frozen=True)
class Rule:
    id: str
    seed: str
    section: str
    statement: str
    invariants: tuple[str, ...] = ()
    scenarios: tuple[str, ...] = ()
    breaks: tuple[BreakRef, ...] = ()
    unobservable: str | None = None
    """Why no simulated seed can see this rule (then `covered_by` is required)."""
    covered_by: tuple[str, ...] = field(default=())
    """Real-process or unit tests (`path::name`) that prove an unobservable rule."""

    @property
    def observable(self) -> bool:
        return self.unobservable is None


def _b(name: str, scenario: str, seed: int = 1) -> BreakRef:
    return BreakRef(name, scenario, seed)


RULES: tuple[Rule, ...] = (
    # -- seed 000, "Admission and exact claim" ------------------------------------------
    Rule("admission.idempotent_replay", S000, "Admission and exact claim",
         "a scoped key admits one Run; a replay gets it back only if every fingerprint field "
         "(session, prompt, source, sigil, scopes, content, priority) matches, else a conflict",
         ("idempotent_admission",), ("basic",),
         (_b("fingerprint_ignores_priority", "basic", 3), _b("conflict_without_key", "basic", 1))),
    Rule("admission.concurrent_replays", S000, "Admission and exact claim",
         "admissions of one scoped key racing at the same instant (same content, one field "
         "changed, HELD with and without a hook; in one Vessel or two) admit exactly one Run: "
         "the same content (its keys in any order) gets its id, changed content a conflict",
         ("idempotent_admission",), ("admission_race",),
         (_b("admission_key_upserted", "admission_race", 2),
          _b("fingerprint_key_order", "admission_race", 1))),
    Rule("admission.publish_open_hop", S000, "Admission and exact claim",
         "a publisher hands the broker only a hop it read PENDING (or PUBLISHED, a lost job "
         "republished): an admission or replay that finds its hop already claimed, held "
         "or closed only observes it",
         ("publish_open_hop",), ("admission_race",),
         (_b("replay_republishes_claimed", "admission_race", 1),)),
    Rule("admission.racing_vessel_is_a_replay", S000, "Admission and exact claim",
         "a Vessel that finds its key admitted by another at the same instant carries on as "
         "the creator only on its own records (Run and delivery): an admission HELD for "
         "another caller's hook is replayed, never handed out without that hook",
         ("failure_has_cause", "idempotent_admission"), ("admission_race",),
         (_b("racing_admission_as_creator", "admission_race", 2),)),
    Rule("admission.held_retention", S000, "Admission and exact claim",
         "a HELD delivery is released to PENDING only after the caller's retention hook "
         "completed; until then nothing is published",
         ("held_released_by_hook",), ("basic",), (_b("retention_after_release", "basic", 1),)),
    Rule("admission.session_fence", S000, "Admission and exact claim",
         "a Bridge session has at most one nonterminal Run; a second admission is refused",
         # session_race bursts admissions into one session through two Vessels: caught at
         # its seed 1 (basic, whose admissions rarely share a session, first at seed 42).
         ("session_fence",), ("basic", "session_race"),
         (_b("no_session_fence", "session_race", 1),)),
    Rule("admission.held_names_owner", S000, "Admission and exact claim",
         "a delivery admitted HELD names the caller whose retention hook must release it; once "
         "released (or never held) it names no owner",
         ("held_names_owner",), ("basic",), (_b("held_without_owner", "basic", 1),)),
    Rule("admission.replay_before_fence", S000, "Admission and exact claim",
         "a scoped key is decided before the session fence: an exact replay of a Run admitted "
         "earlier returns it even while another Run of its session is open",
         ("replay_before_fence",), ("session_race",),
         (_b("session_fence_before_replay", "session_race", 1),)),
    Rule("admission.session_busy_is_true", S000, "Admission and exact claim",
         "only an Intent naming a Bridge session is refused as busy, and the refusal names a "
         "nonterminal Run of that same session; Intents without a session are never fenced",
         ("session_busy_is_true",), ("basic",), (_b("sessionless_fenced", "basic", 3),)),
    Rule("admission.session_fence_across_vessels", S000, "Admission and exact claim",
         "the session fence and the one-Run-per-key rule hold when several Vessels admit at "
         "once: the ledger's admission transaction decides, not each process (issue 15, M11)",
         ("session_fence", "idempotent_admission"), ("session_race",),
         (_b("session_fence_in_process", "session_race", 1),)),
    Rule("admission.publish_after_commit", S000, "Admission and exact claim",
         "once the admission commits (and a HELD one is released) the submit publishes its hop "
         "before it returns, a replay too for a delivery it finds PENDING; only a failed "
         "publish or acknowledgement leaves the hop to the delivery relay",
         ("admission_publishes",), ("basic",), (_b("submit_leaves_publish_to_relay", "basic", 1),)),
    Rule("admission.pins_latest", S000, "Admission and exact claim",
         "admission pins the latest version of the Pattern the Intent names, in the "
         "admitting engine's registry: a newer release pins its newer version, and no "
         "registered Pattern is refused as unknown",
         ("admission_pins_latest",), ("rolling_upgrade", "runtime_mutation"),
         (_b("admission_pins_oldest", "rolling_upgrade", 1),)),
    Rule("admission.replay_not_created", S000, "Admission and exact claim",
         "a replay of a keyed admission returns the existing Run and says so: created=True "
         "only for the call that admitted it",
         ("replay_not_created",), ("basic",), (_b("replay_answers_created", "basic", 1),)),
    Rule("admission.scoped_key", S000, "Admission and exact claim",
         "a keyed Run is stored under its caller's idempotency scope (source and sigil); a "
         "keyless one under none",
         ("scope_names_caller",), ("basic",), (_b("keyed_run_unscoped", "basic", 1),)),
    Rule("admission.retention_failure_is_true", S000, "Admission and exact claim",
         "a caller is told its retention failed only when the held generation was settled "
         "FAILED (by its own failure or another owner's) or its release was struck by a "
         "fault; a generation its hook released goes on and is never reported failed",
         ("retention_failure_settled",), ("basic",),
         (_b("retention_refused_after_release", "basic", 1),)),
    Rule("admission.invalid_intent", S000, "Admission and exact claim",
         "an Intent failing validation (even one built without pydantic's checks) is refused as "
         "InvalidIntent naming the failing field, and nothing is written",
         ("invalid_intent_refused",), ("basic",), (_b("invalid_intent_unreported", "basic", 1),)),
    Rule("admission.single_flight_bounded", S000, "Admission and exact claim",
         "the one-process single flight per idempotency key and per session (and the per-Run "
         "evidence repair) holds one lock per key only while someone holds or waits on it",
         ("admission_locks_released",), ("basic",), (_b("admission_locks_kept", "basic", 1),)),
    Rule("admission.single_flight_per_key", S000, "Admission and exact claim",
         "within one process, admissions of one idempotency key are serialised, so a Run's "
         "retention hook runs once at a time there (a later same-key call finds it released)",
         ("admission_single_flight",), ("admission_race",),
         (_b("admission_key_unlocked", "admission_race", 1),)),
    Rule("outbox.published_has_job", S000, "Admission and exact claim",
         "PUBLISHED is recorded only once the broker holds a job of exactly that hop key",
         ("published_has_job",), ("basic",), (_b("published_without_job", "basic", 8),)),
    Rule("outbox.forward_only", S000, "Admission and exact claim",
         "a delivery only moves forward; a SETTLED or FAILED delivery never reopens",
         ("delivery_never_reopens",), ("basic",), (_b("closed_delivery_reopened", "basic", 5),)),
    Rule("outbox.hop_key_identity", S000, "Admission and exact claim",
         "run:<id>:<seq> names exactly one generation; a finished key is never published again, "
         "a new generation takes a fresh sequence",
         ("hop_key_identity", "fresh_key_new_job"), ("crashloop",),
         (_b("rotation_reuses_key", "crashloop", 4),)),
    Rule("claim.exact", S000, "Admission and exact claim",
         "a claim moves only a QUEUED Run at exactly the delivered sequence, from PENDING or "
         "PUBLISHED, once; a stale or duplicate delivery is skipped",
         ("claim_is_exact", "single_claim"), ("basic",), (_b("claim_fence", "basic", 4),)),
    Rule("claim.stale_redelivery_inert", S000, "Admission and exact claim",
         "a late redelivery of an old hop key, after the hop finished and the Run's sequence "
         "moved on, is refused by the exact claim: no write, Step, publish or effect",
         ("stale_hop_inert",), ("consent",), (_b("stale_claim_catches_up", "consent", 12),)),
    Rule("claim.started_at_stable", S000, "Admission and exact claim",
         "started_at is written by the first claim only; a resume claim keeps it",
         ("started_at_stable",), ("consent",), (_b("started_at_rewritten", "consent", 1),)),
    Rule("claim.priority_mapping", S000, "Admission and exact claim",
         "the broker job carries 100 - doctrine priority, written once at the enqueue edge",
         ("broker_priority",), ("basic",), (_b("doctrine_priority", "basic", 1),)),
    # -- seed 000, "Events, settlement, and waits" --------------------------------------
    Rule("settlement.fenced", S000, "Events, settlement, and waits",
         "a hop settles only the claimed status and sequence: a Run gone CANCELLING or moved on "
         "is not settled by the old hop",
         ("settlement_fenced",), ("cancel",), (_b("settle_without_claim", "cancel", 1),)),
    Rule("settlement.terminal_final", S003, "Truth closes first",
         "once terminal status commits the Run never changes again, even under a racing cancel",
         ("terminal_is_final",), ("cancel",), (_b("cancel_reopens_terminal", "cancel", 4),)),
    Rule("events.terminal_evidence", S000, "Events, settlement, and waits",
         "every terminal Run ends with exactly one terminal Step; startup repairs a missing one "
         "and never adds a second",
         ("terminal_evidence_once", "terminal_step_at_most_once"), ("crashloop",),
         (_b("evidence_repaired_twice", "crashloop", 1),
          _b("evidence_debt_forgotten", "crashloop", 2))),
    Rule("events.terminal_step_ledger_once", S000, "Events, settlement, and waits",
         "the ledger refuses a Run's second terminal Step in the append's own transaction, "
         "whichever process writes it: two live boots failing the same orphan write its "
         "evidence once (issue 15, M11)",
         ("terminal_step_at_most_once",), ("crashloop",),
         (_b("second_terminal_step_written", "crashloop", 1),)),
    Rule("events.subscriber_order", S000, "Events, settlement, and waits",
         "each subscriber sees a Run's events in cursor order, gaps only at a resync boundary, "
         "whose next event follows its cursor at once (a boundary taken after the terminal "
         "event sits just before it), and one terminal event at most",
         ("subscriber_order",), ("events",), (_b("slow_reader_loses_events", "events", 1),
                                               _b("boundary_two_before_terminal", "events", 1))),
    Rule("events.cut_off_honest", S000, "Events, settlement, and waits",
         "a reader is reported cut off only when its channel closed before it took the "
         "terminal event (the HTTP stream tells a cut-off client from a finished one by it)",
         ("cut_off_honest",), ("events",), (_b("reader_born_cut_off", "events", 1),)),
    Rule("hardware.budget", S003, "Three boundaries",
         "at most 8 hardware convergence calls per Run and 3 in a row per capability; the "
         "counters live in the checkpoint and survive parks",
         ("hardware_budget",), ("hardware",), (_b("hardware_budget_reset", "hardware", 2),)),
    # -- seed 003, "Return makes a new claim" -------------------------------------------
    Rule("consent.owner_cas", S003, "Return makes a new claim",
         "only the owner CAS of a decided consent returns AWAITING_CONSENT to QUEUED; the "
         "resumed hop reads the durable verdict",
         ("resume_reads_decided_owner", "no_replay_after_death"), ("consent",),
         (_b("readmit_without_cas", "consent", 1),)),
    Rule("delegate.owner_cas", S003, "Return makes a new claim",
         "a delegate wait returns to QUEUED only through the CAS of its own terminal agent job",
         ("resume_reads_decided_owner",), ("delegate",),
         (_b("delegate_resumed_unfinished", "delegate", 1),)),
    Rule("service.owner_cas", S000, "Service job attempts",
         "a service wait returns to QUEUED only through the owner CAS of its proved terminal "
         "attempt; the generic status writer cannot resume it",
         ("resume_reads_decided_owner",), ("service_wait",),
         (_b("service_resumed_unfinished", "service_wait", 1),)),
    Rule("consent.chain_bounded", S003, "Return makes a new claim",
         "approval rounds chain up to three, then settle DONE with the chain-limit bottleneck; "
         "several approvals in one round create no consent and settle DONE with an honest "
         "bottleneck; the verdicts a gate reports are its consents' durable decisions",
         ("gate_outcome",), ("consent",), (_b("chain_limit_four_rounds", "consent", 1),)),
    Rule("worker.settle_releases_checkpoint", S000, "Events, settlement, and waits",
         "a hop that settles its Run deletes the Run's checkpoint after terminal truth; only a "
         "failed deletion leaves it, as a debt the relay and startup pay",
         ("settled_hop_releases_checkpoint",), ("crashloop", "consent"),
         (_b("settle_keeps_checkpoint", "crashloop", 1),)),
    Rule("consent.gate_acts_on_verdict", S003, "Return makes a new claim",
         "a resumed gate acts on the durable verdict: a DONE consent gate applied its round's "
         "effect in exactly the rounds whose verdict is APPROVED",
         ("gate_effects_follow_verdicts",), ("consent",),
         (_b("gate_effect_skipped", "consent", 1),)),
    Rule("jobs.staged_output_is_reply", S004, "Durable states",
         "a worker stages the model's validated output as it is: published, or waiting on the "
         "dependency the output names, and accepted exactly when published; a well-formed "
         "output never fails its job as invalid",
         ("interpretation_is_reply",), ("leased_jobs", "lapsed_lease"),
         (_b("needs_ignored", "leased_jobs", 1),)),
    Rule("jobs.malformed_output_fails", S004, "Durable states",
         "a model output that is not a bundle (not an object, assertions not a list of "
         "objects, an unknown field, a `needs` that is neither null nor a named dependency) "
         "is never staged: the attempt fails the job as invalid model output and the "
         "evidence stays",
         ("malformed_reply_failed",), ("leased_jobs", "lapsed_lease"),
         (_b("malformed_output_staged", "leased_jobs", 1),
          _b("invalid_output_retried", "leased_jobs", 1),
          _b("invalid_output_abandoned", "leased_jobs", 1))),
    Rule("admission.released_pin", S000, "Admission and exact claim",
         "admission pins each Run to the version this release ships of its Pattern, and a "
         "Run ends DONE only under that pin: the declared versions stay what earlier "
         "releases pinned",
         ("done_on_released_pin",), ("runtime_mutation", "admission_race"),
         (_b("chatty_renumbered", "runtime_mutation", 1),)),
    Rule("waits.resume_keeps_stasis", S003, "Return makes a new claim",
         "a resumed hop continues from the checkpoint its own Run saved: a Run fails as stasis "
         "lost or with an invalid checkpoint only when that checkpoint is missing or foreign "
         "(a storage layer that misfiled it)",
         ("stasis_kept",), ("consent", "misfiled_stasis"),
         (_b("resume_refuses_own_snapshot", "consent", 1),)),
    Rule("waits.errands_bounded", S003, "Return makes a new claim",
         "a Run that chains delegated jobs and service calls stops after the rounds it asked "
         "for: it owns no more children than its rounds",
         ("errands_bounded",), ("cancel_children",),
         (_b("errands_past_rounds", "cancel_children", 4),)),
    Rule("waits.errands_complete", S003, "Return makes a new claim",
         "a Run that chains delegated jobs and service calls and ends DONE went every round "
         "it asked for, or the Pattern's declared default when it named none",
         ("errands_complete",), ("cancel_children",),
         (_b("errands_stop_early", "cancel_children", 4),)),
    Rule("hardware.budget_outcome", S003, "Three boundaries",
         "a hardware request past the budget fails before another convergence call, naming "
         "the spent counters; a Run whose needs fit it ends DONE with every need used once, "
         "its state re-read from the checkpoint",
         ("hardware_outcome",), ("hardware",), (_b("hardware_best_effort", "hardware", 2),)),
    Rule("waits.resume_reads_owner", S003, "Return makes a new claim",
         "a resumed hop is handed its own terminal owner whatever its end (a failed or lost "
         "agent job included) and the Run ends with that owner's result or its honest "
         "failure; the resume never refuses the owner the CAS admitted it on",
         ("wait_result_is_owner",), ("delegate", "service_wait"),
         (_b("resume_refuses_failed_job", "delegate", 1),)),
    Rule("consent.verdict_readmits", S000, "Events, settlement, and waits",
         "a verdict records its decision principal (only the consent's owner may decide) and "
         "re-admits the parked Run through the owner CAS before it answers; a duplicate "
         "verdict is inert and a late contradicting one is refused (the first one stands); "
         "of two verdicts racing one consent the CAS's loser is refused",
         ("verdict_honoured",), ("consent",),
         (_b("verdict_left_to_relay", "consent", 1),
          _b("verdict_last_writer_wins", "consent", 3),
          _b("verdict_answered_as_asked", "consent", 1))),
    Rule("waits.fresh_sequence", S003, "Return makes a new claim",
         "a return allocates a fresh sequence (seq + 1) with a PENDING delivery in the same "
         "commit; the parked generation stays closed",
         ("delivery_never_reopens", "sequences_gap_free"), ("consent",),
         (_b("readmit_same_sequence", "consent", 1),)),
    # -- seed 000, "Cancellation, mutation, and recovery" -------------------------------
    Rule("cancel.containment_order", S000, "Cancellation, mutation, and recovery",
         "CANCELLED commits only after the parent broker job is fenced first and then every "
         "agent job, service attempt and pending consent is contained",
         ("cancelled_after_containment",), ("cancel", "cancel_children"),
         (_b("no_containment", "cancel", 1), _b("parent_not_fenced", "cancel", 1),
          _b("agent_sweep_stops_at_settled", "cancel_children", 1),
          _b("attempt_sweep_stops_at_settled", "cancel_children", 5))),
    Rule("cancel.no_effect_while_cancelling", S000, "Cancellation, mutation, and recovery",
         "a hop whose Run went CANCELLING after its claim creates no external effect: it "
         "re-reads the Run before each effect and stops unless it still holds the claim",
         ("effect_under_claim",), ("cancel_at_claim",),
         (_b("effect_ignores_cancelling", "cancel_at_claim", 1),)),
    Rule("cancel.completes_when_contained", S000, "Cancellation, mutation, and recovery",
         "a cancel whose parent job is finished and whose children are contained, with no "
         "fault in its way, commits CANCELLED rather than answering CANCELLING",
         ("cancel_completes",), ("cancel", "cancel_children"),
         (_b("cancel_never_completes", "cancel", 1),
          _b("fence_gives_up_on_lost_ack", "cancel_children", 5))),
    Rule("recovery.lost_after_containment", S000, "Cancellation, mutation, and recovery",
         "an orphan failed as lost or abandoned has its correlated children contained first: "
         "no pending consent, running agent job or open service attempt outlives the failure",
         ("lost_after_containment",), ("misfiled_stasis",),
         (_b("children_without_consents", "misfiled_stasis", 4),)),
    Rule("cancel.parent_fenced_first", S000, "Cancellation, mutation, and recovery",
         "whatever a cancel answers, it has fenced the broker's parent job first: a live job "
         "is sent its abort (an aborting one is not re-aborted), never left to finish alone",
         ("cancel_fences_parent",), ("cancel_children",),
         (_b("fence_only_aborting", "cancel_children", 2),)),
    Rule("cancel.refusal_is_cancelling", S000, "Cancellation, mutation, and recovery",
         "a child that refuses its cancel (the agent runtime's refusal, a service attempt's "
         "ServiceError) leaves an honest, retryable CANCELLING: the cancel answers, it does "
         "not raise", ("cancel_answers",), ("cancel_children",),
         (_b("agent_refusal_raises", "cancel_children", 3),)),
    Rule("cancel.late_job_fenced", S000, "Cancellation, mutation, and recovery",
         "a publisher that lost its acknowledgement behind a cancellation aborts the job it "
         "may have landed, so no live hop job outlives its Run's cancellation",
         ("late_job_fenced", "no_live_job_after_terminal"), ("cancel",),
         (_b("late_job_left_queued", "cancel", 15),)),
    Rule("cancel.late_job_fenced_when_cancelled", S000, "Cancellation, mutation, and recovery",
         "a publisher cancelled after its job landed and before the acknowledgement came back "
         "(a graceful shutdown cancelling its request or relay) still fences that job, "
         "shielded, before the cancellation propagates",
         ("late_job_fenced",), ("shutdown_in_flight",),
         (_b("cancelled_publisher_unfenced", "shutdown_in_flight", 5),)),
    Rule("cancel.reread_repairs_evidence", S000, "Cancellation, mutation, and recovery",
         "cancelling an already CANCELLED Run again repeats the sweep and leaves its terminal "
         "Step in place, writing it if it is missing",
         ("reread_repairs_evidence",), ("cancel",), (_b("reread_skips_evidence", "cancel", 14),)),
    Rule("cancel.terminal_step_once", S000, "Events, settlement, and waits",
         "the canceller's terminal Step is written once, never teed through a hop's writer "
         "as a second terminal event",
         ("terminal_step_at_most_once",), ("skewed_sweep",),
         (_b("duplicate_cancelled_step", "skewed_sweep", 1),)),
    Rule("startup.prepark_binds_run", S003, "Return makes a new claim",
         "startup parks a pre-park window only for the checkpoint of that very Run and hop",
         ("prepark_binds_run",), ("misfiled_stasis",),
         (_b("prepark_any_run", "misfiled_stasis", 4),)),
    Rule("startup.prepark_window_parked", S003, "Return makes a new claim",
         "a hop that died with its checkpoint and owner row saved (consent.row_saved, "
         "delegate.submitted) is parked on exactly that owner, never failed as lost "
         "(DESIGN section 5: the designed outcome of each crash window)",
         ("crash_window_outcome",), ("crashloop",),
         (_b("window_never_parked", "crashloop", 5),)),
    Rule("startup.orphan_job_fenced", S000, "Cancellation, mutation, and recovery",
         "an orphan of a dead boot (claim.committed) fails as lost and its exact pre-boot "
         "hop job is fenced, never left active at the broker",
         ("crash_window_outcome",), ("crashloop",),
         (_b("orphan_job_left_active", "crashloop", 3),)),
    Rule("claim.pinned_pattern", S003, "Return makes a new claim",
         "a hop runs the Pattern version pinned at admission; a failure names its real cause",
         ("failure_has_cause",), ("basic",), (_b("pin_misread", "basic", 1),)),
    Rule("claim.unregistered_pin", S000, "Admission and exact claim",
         "the worker verifies the pinned Pattern: a Run pinned to a version this Vessel "
         "does not hold (a rolling upgrade's newer admission) fails as 'pinned Pattern "
         "unavailable', never DONE under another version (seed 003: a pinned-manifest "
         "mismatch fails so)",
         ("unregistered_pin_fails", "failure_has_cause"), ("rolling_upgrade",),
         (_b("pin_falls_back_to_latest", "rolling_upgrade", 1),)),
    Rule("startup.fence_before_rotation", S000, "Cancellation, mutation, and recovery",
         "startup and the relay rotate a pre-boot generation only once its broker job is "
         "fenced and finished",
         ("fenced_before_rotation",), ("crashloop",), (_b("orphan_fence", "crashloop", 24),)),
    Rule("startup.orphans_of_other_boots", S000, "Cancellation, mutation, and recovery",
         "orphan recovery fences and fails as lost only a RUNNING or AWAITING_HARDWARE Run "
         "claimed by another boot, never one this boot's hop still holds",
         ("liveness", "effect_under_claim", "settlement_fenced",
          "abandoned_only_after_sweep", "orphans_of_earlier_boots"), ("crashloop",),
         (_b("orphan_own_boot", "crashloop", 1),)),
    Rule("relays.abandoned_hop", S000, "Cancellation, mutation, and recovery",
         "a hop of the live boot whose exact broker job a sweep aborted under its claim (any "
         "clock) is recovered in that same boot like an orphan: its window parked, else "
         "children contained and the Run failed, fenced by that exact claim token; a hop still "
         "running, a job still live, or a hop that failed out of its job is left alone",
         ("liveness", "abandoned_only_after_sweep"), ("skewed_sweep",),
         (_b("abandoned_hop_left_live", "skewed_sweep", 4),)),
    Rule("startup.cleanup_best_effort", S000, "Cancellation, mutation, and recovery",
         "checkpoint deletion of terminal Runs is best-effort debt: a failed deletion never "
         "aborts startup and is retried until paid",
         ("cleanup_never_blocks", "checkpoint_released"), ("crashloop",),
         (_b("cleanup_blocks_startup", "crashloop", 9),)),
    Rule("startup.untrusted_start_degrades", S000, "Cancellation, mutation, and recovery",
         "an active broker row without a trustworthy start timestamp (none, zero or "
         "infinite) is never fenced as pre-boot: the pass degrades (the strict profile "
         "refuses) and the job is left alone",
         ("live_hop_not_fenced", "startup_degrades_honestly"), ("degraded_startup",),
         (_b("untrusted_start_fenced", "degraded_startup", 2),
          _b("degenerate_start_trusted", "degraded_startup", 4))),
    Rule("startup.delivery_truth_degrades", S000, "Cancellation, mutation, and recovery",
         "a QUEUED Run whose delivery row is missing or out of step with it (re-read first) "
         "is never passed as clean: the pass degrades and the strict profile refuses",
         ("startup_degrades_honestly",), ("degraded_startup",),
         (_b("mismatch_passed_clean", "degraded_startup", 5),)),
    Rule("startup.delivery_verdict_true", S000, "Cancellation, mutation, and recovery",
         "startup reports a QUEUED Run without a delivery row at its sequence as corrupt and "
         "one whose row is out of step as mismatched, never the one for the other",
         ("delivery_verdict_true",), ("degraded_startup",),
         (_b("mismatch_called_corrupt", "degraded_startup", 5),)),
    Rule("startup.refired_true", S000, "Cancellation, mutation, and recovery",
         "startup reports as refired exactly the consent, delegate and service waits its wait "
         "pass re-admitted (the decided consents, terminal delegated jobs and terminal "
         "attempts), never one it left parked nor one it resumed unreported",
         ("startup_refired_true",), ("service_wait",),
         (_b("service_refire_inverted", "service_wait", 1),)),
    Rule("relays.stranded_job_redelivered", S000, "Cancellation, mutation, and recovery",
         "a hop job a dead boot dequeued and never claimed is retired and its Run rotated to "
         "a fresh sequence by the next startup or relay, never left for the broker's "
         "heartbeat sweep; a live peer boot's dequeued job is never aborted (issue 15, M11)",
         ("redelivered_promptly", "fenced_before_rotation"), ("degraded_startup",),
         (_b("redelivery_waits_for_sweep", "degraded_startup", 1),)),
    Rule("startup.queued_job_retained", S000, "Cancellation, mutation, and recovery",
         "startup and the delivery relay retain a QUEUED Run's hop job that is still queued at "
         "the broker; only a pre-boot active job is fenced",
         ("queued_job_retained",), ("crowded", "basic"),
         (_b("queued_job_fenced", "crowded", 1),)),
    Rule("recovery.dequeued_publish_acknowledged", S000, "Cancellation, mutation, and recovery",
         "startup and the delivery relay, finding a QUEUED Run's unacknowledged (PENDING) "
         "delivery's job dequeued by a worker, record the missed acknowledgement (mark it "
         "published) unless they retire a dead boot's stranded job",
         ("dequeued_publish_acknowledged",), ("two_vessels",),
         (_b("dequeued_ack_skipped", "two_vessels", 5),)),
    Rule("recovery.finished_job_rotated", S000, "Cancellation, mutation, and recovery",
         "startup and the delivery relay rotate a QUEUED Run whose hop job finished without "
         "claiming it (a claim that failed past the retry budget) to a fresh sequence and "
         "publish it; a finished job is never reported as still fencing",
         ("finished_job_rotated",), ("crowded",),
         (_b("finished_job_fenced", "crowded", 2),)),
    Rule("startup.reconciles_every_page", S000, "Cancellation, mutation, and recovery",
         "startup reconciliation recovers every CANCELLING, orphaned and QUEUED Run, however "
         "many: it pages past the first page",
         ("startup_visits_every_run",), ("crowded",),
         (_b("reconcile_first_page_only", "crowded", 1),)),
    Rule("startup.cleanup_debts_reported", S000, "Cancellation, mutation, and recovery",
         "startup retries the deletion of every terminal Run's checkpoint and reports the ones "
         "that would not go as owed (the relay pays them), never hiding one",
         ("startup_names_cleanup_debts",), ("restart_storm", "crashloop"),
         (_b("cleanup_debts_unreported", "restart_storm", 9),)),
    Rule("relays.supervised_restart", S000, "Cancellation, mutation, and recovery",
         "the lifespan supervisor restarts a relay that exits before shutdown, each time "
         "after a deterministic exponential backoff (0.1 s, doubling) capped at five "
         "seconds, and the restarted relay goes on passing",
         ("relay_restarted_on_backoff",), ("relay_bugs",),
         (_b("relay_backoff_flat", "relay_bugs", 1), _b("relay_left_dead", "relay_bugs", 1))),
    Rule("relays.page_every_run", S000, "Cancellation, mutation, and recovery",
         "each relay pass reads one revisit page and one forward page, and the forward cursor "
         "goes round every page, so no Run drops out of repair however many wait",
         ("relay_pages_every_run",), ("crowded",),
         (_b("relay_first_page_only", "crowded", 1),)),
    Rule("relays.page_cursor_exact", S000, "Cancellation, mutation, and recovery",
         "a relay's next page starts right after the last Run of the page before: its keyset "
         "cursor is that Run's exact (updated_at, id), never one assembled from other rows",
         ("page_cursor_names_a_listed_run",), ("crowded",),
         (_b("relay_cursor_rounded_down", "crowded", 1),)),
    Rule("relays.delivery", S000, "Admission and exact claim",
         "the delivery relay probes the exact hop key and republishes it when absent, so every "
         "admitted Run ends after heal",
         ("liveness",), ("basic",), (_b("relay_never_republishes", "basic", 8),)),
    Rule("retry.backoff", S000, "Cancellation, mutation, and recovery",
         "a transient ledger error is retried after a jittered, exponentially growing delay, "
         "never at once; a Step append is never repeated blindly (its repair owns it)",
         ("retry_backoff",), ("basic",), (_b("lazy_ledger_retry", "basic", 1),)),
    Rule("retry.outlasts_blip", S000, "Cancellation, mutation, and recovery",
         "a database blip shorter than the retry budget never reaches the caller: a hop "
         "outlasts it rather than failing a Run whose effect may already have happened",
         ("retry_outlasts_blip", "transient_never_fails_a_run"), ("basic",),
         (_b("short_ledger_retry", "basic", 10),)),
    # -- pauses, zombies and several Vessels (issue 18 item 2, issue 15 item 1) ----------
    Rule("claim.refused_while_cancelling", S000, "Cancellation, mutation, and recovery",
         "a hop dequeued before its Run went CANCELLING (paused between dequeue and claim "
         "while the cancel committed) never claims it: the claim CAS takes only a QUEUED Run",
         ("claim_is_exact",), ("paused",), (_b("claim_over_cancelling", "paused", 2),)),
    Rule("boots.live_peer_not_fenced", S000, "Cancellation, mutation, and recovery",
         "with several Vessels on one database a hop claimed by another boot is fenced and "
         "failed as lost only once that boot's lease expired; a live peer's hops are left alone",
         ("orphans_of_earlier_boots",), ("two_vessels",),
         (_b("fence_live_boot", "two_vessels", 1),)),
    Rule("boots.judge_only_when_steady", S000, "Cancellation, mutation, and recovery",
         "a boot judges other boots dead by their leases only while its own lease is steady: "
         "not right after it registered, after its own lease lapsed, while its renewal "
         "still retries through an outage, nor for a whole lease after a slow renewal "
         "returned (peers whose renewals fell due earlier in the outage may have lapsed)",
         ("orphans_of_earlier_boots",), ("two_vessels",),
         (_b("orphans_of_any_boot", "two_vessels", 2),
          _b("renewal_trusts_its_start", "two_vessels", 58))),
    Rule("boots.lapse_reported", S000, "Cancellation, mutation, and recovery",
         "a boot reports a lapse of its own lease (other boots may have recovered its work) "
         "for each renewal the registry answered expired and each that returned a whole "
         "lease after the previous one began, whatever the registry answered",
         ("lease_lapse_reported",), ("two_vessels", "zombies"),
         (_b("lapse_only_when_told", "two_vessels", 1),)),
    Rule("boots.renewed_before_serving", S000, "Cancellation, mutation, and recovery",
         "a boot renews its lease after reconciling and before any worker takes a job, so a "
         "reconciliation longer than the renewal period never leaves it serving on a lease "
         "its peers may judge expired",
         ("claims_on_a_renewed_lease", "orphans_of_earlier_boots"), ("two_vessels",),
         # A peer rarely fences the stale boot in time (seed 1654 of 1-3000): a long
         # reconciliation is nearly always an outage's, after which peers rightly judge
         # nobody for a whole lease, or a stall's, which excuses the fencing. The claim
         # check sees the stale lease at the boot's first claim instead. A live, reachable
         # slow boot (FaultKind.SLOW_RECONCILE) is driven by plan in
         # tests/scenarios/test_pauses_and_zombies.py: in two_vessels' swarm it hid
         # recorded_evidence_left (not caught in seeds 1-196).
         (_b("lease_stale_at_ready", "two_vessels", 3),)),
    Rule("boots.peer_dequeued_job_not_fenced", S000, "Cancellation, mutation, and recovery",
         "startup and the relay fence an active job older than the boot only when no other "
         "boot's lease is live: a live peer may have dequeued it and not claimed it yet",
         ("orphans_of_earlier_boots",), ("two_vessels", "zombies"),
         (_b("fence_peer_dequeued_job", "two_vessels", 1),)),
    Rule("boots.fenced_holder_inert", S000, "Admission and exact claim",
         "a zombie's hop, failed as lost while its boot was presumed dead, changes nothing "
         "once it resumes: orphan recovery aborts its job (the worker cancels the hop) and the "
         "ledger refuses its settlement, checkpoint, consent, agent job and park by claim and "
         "sequence",
         ("fenced_holder_inert", "settlement_fenced"), ("zombies", "two_vessels"),
         (_b("checkpoint_unfenced", "zombies", 11),)),
    Rule("events.terminal_step_closes_log", S000, "Events, settlement, and waits",
         "a Run's terminal Step is its last: the ledger refuses every later Step, so a "
         "zombie hop that resumes after its Run was failed writes no evidence behind it",
         ("terminal_step_is_last",), ("zombies",),
         (_b("steps_after_terminal_written", "zombies", 12),)),
    Rule("relays.recorded_evidence_debts", S000, "Events, settlement, and waits",
         "with several Vessels the relays also pay the ledger's recorded terminal-evidence "
         "debts, so a Run whose boot died between terminal truth and its Step (and was not "
         "restarted: a zombie's successor already serves) still gets exactly one terminal Step",
         ("terminal_evidence_once",), ("zombies", "two_vessels"),
         # Since issue 17 a hop whose Step writer is idle writes its terminal Step in
         # the settlement's transaction, so the debt needs a hop that settles alone
         # (an earlier Step failed or stalled) in a boot no startup follows: a resumed
         # zombie killed right after (FaultKind.ZOMBIE_KILL, zombies only, whose Step
         # appends also fail now and then). Caught by zombies seeds 1, 16, 22 of 1-60
         # (two_vessels, without the kill: seed 301).
         (_b("recorded_evidence_left", "zombies", 1),)),
    # -- seed 000, "Service job attempts" ------------------------------------------------
    Rule("service.proof_before_resubmit", S000, "Service job attempts",
         "a transmission after the first rests on proof of no effect or same-key replay; one "
         "provider effect per idempotency identity",
         ("service_single_effect",), ("service",), (_b("blind_resubmit", "service", 37),)),
    Rule("service.key_payload", S000, "Service job attempts",
         "a changed payload under a used idempotency key is refused and never reaches the "
         "provider; the same request is never refused, whatever order its keys arrive in, "
         "and neither is a fresh attempt under a new key",
         ("service_key_payload",), ("service",), (_b("payload_change_accepted", "service", 1),
                                                  _b("digest_follows_key_order", "service", 1),
                                                  _b("fresh_prepare_refused", "service", 1))),
    Rule("service.cancel_intent", S000, "Service job attempts",
         "a cancel records its intent before anything else; the request is never cleared, "
         "CANCELLED comes only after it, and an unfinished attempt keeps it for re-driving",
         ("service_cancel_recorded",), ("service",),
         (_b("cancel_intent_dropped", "service", 1),)),
    Rule("service.resubmit_on_proof", S000, "Service job attempts",
         "a missing job re-submits on proof of no effect or same-key replay (unless a cancel "
         "was requested: then proof of no effect cancels the attempt), and only on proof",
         ("service_resubmits_on_proof", "service_single_effect"), ("service",),
         (_b("proof_never_resubmits", "service", 2), _b("cancel_ignores_no_effect", "service", 5))),
    Rule("events.replay_from_cursor", S000, "Events, settlement, and waits",
         "a subscription replays every held event after its cursor, or starts with one "
         "resync boundary when the cursor is older than the window; a cursor from the "
         "future, a closed channel or a full channel is refused",
         ("subscribe_honest",), ("events",), (_b("future_cursor_clamped", "events", 1),)),
    Rule("events.cursor_sequence", S000, "Events, settlement, and waits",
         "every event takes the next cursor of its channel, the first one 1; replay holds "
         "the newest of them up to its limit, and the channel reports that span as its "
         "replay window",
         ("replay_window_honest",), ("events",),
         (_b("first_cursor_two", "events", 1), _b("replay_window_short", "events", 1))),
    Rule("events.readers_independent", S000, "Events, settlement, and waits",
         "each accepted reader is registered on its own beside the readers already on the "
         "channel, so a later reader never displaces an earlier one from the live stream",
         ("reader_registered",), ("events",), (_b("reader_keys_reused", "events", 1),)),
    Rule("events.reader_queue_bound", S000, "Events, settlement, and waits",
         "a live reader's queue holds at most 256 undelivered events: a stalled reader "
         "has every event after its cursor queued up to 256, and once more arrive it is "
         "owed one resync boundary instead, never earlier; a backlog of exactly 256 at "
         "subscription is queued, not a resync",
         ("reader_queue_bound", "subscribe_honest"), ("long_stream",),
         (_b("reader_queue_one_short", "long_stream", 1),)),
    Rule("events.close_drains", S000, "Events, settlement, and waits",
         "after the terminal event a channel closes only once its readers drained it (or "
         "the grace expired): a reader that keeps up sees the terminal event",
         ("stream_reaches_terminal",), ("events",), (_b("close_without_grace", "events", 1),)),
    Rule("events.close_cuts_off", S000, "Events, settlement, and waits",
         "a channel that closes leaves no reader attached: each took the terminal event, "
         "left, or was cut off; the owner drops it only after that",
         ("dropped_channel_unread",), ("events",), (_b("close_is_a_no_op", "events", 1),)),
    Rule("events.close_ends_when_drained", S000, "Events, settlement, and waits",
         "a close after the terminal event waits only while readers remain: once the last "
         "one took the terminal event or left, the channel closes, not at the grace's end",
         ("close_ends_when_drained",), ("events",),
         (_b("reader_leaves_unsignalled", "events", 1),)),
    Rule("events.group_commit_takes_queued", S000, "Events, settlement, and waits",
         "on a ledger that writes several Steps at once, the writer's one append in flight "
         "carries every Step already queued in its generation (no repair), up to the group "
         "limit (issue 17, M14)",
         ("group_takes_queued",), ("events",), (_b("group_of_one", "events", 1),)),
    Rule("events.barrier_ends_linger", S000, "Events, settlement, and waits",
         "a flush is not held back by group commit: a writer lingering over queued Steps "
         "hands them to the ledger once a barrier waits (issue 17, M14)",
         ("barrier_ends_linger",), ("consent_batched",),
         (_b("barrier_left_lingering", "consent_batched", 1),)),
    Rule("events.closed_channel_discarded", S000, "Events, settlement, and waits",
         "a Run's channel lives until its owner closes it through the bus, which discards "
         "it at once: a live process's bus never keeps a closed channel",
         ("closed_channel_discarded",), ("events",),
         (_b("channel_never_discarded", "events", 1),)),
    Rule("events.linger_holds", S000, "Events, settlement, and waits",
         "a group-committing writer lingers: an append nobody hurries (no barrier, not "
         "closing, no repair, neither a full group nor a full queue) starts only once the "
         "writer's linger passed since its previous append ended, or since its hop's claim "
         "for the first (issue 17, M14)",
         ("linger_holds",), ("events",), (_b("writer_never_lingers", "events", 1),)),
    Rule("events.linger_bounded", S000, "Events, settlement, and waits",
         "a group-committing writer lingers at most the designed 50 ms: Steps queued behind "
         "an append go into the next one no later than that linger after it ended, so live "
         "readers see them that late at most (issue 17, M14)",
         ("linger_bounded",), ("step_burst",), (_b("writer_lingers_long", "step_burst", 2),)),
    Rule("events.full_group_ends_linger", S000, "Events, settlement, and waits",
         "a group-committing writer lingers only over less than a group: an append that "
         "ends with a full group (64 Steps) or more queued behind it is followed at once "
         "by the next append, however the queue passed the group limit (issue 17, M14)",
         ("full_group_not_held",), ("step_burst",),
         (_b("full_group_left_lingering", "step_burst", 2),)),
    Rule("events.unfold_restores_steps", S000, "Events, settlement, and waits",
         "a settlement that carried the Steps a lingering writer held and did not apply "
         "gives them back: the writer appends exactly those Steps, kinds and metadata, in "
         "publish order, before anything else, and all of them before the fenced hop "
         "returns unless an append failed (issue 17, M14)",
         ("restored_steps_first",), ("step_burst",),
         (_b("restore_without_metadata", "step_burst", 2),)),
    Rule("events.settle_folds_steps", S000, "Events, settlement, and waits",
         "a hop settles its terminal truth once its Step writer has no append in flight, so "
         "the settlement carries the queued Steps and the terminal Step lands behind every "
         "Step written; beside an append in flight it settles alone only after the whole "
         "fold wait (1 s); it never flushes a lingering writer first, so what that writer "
         "holds rides in the settlement (issue 17, M14)",
         ("settle_folds_steps",), ("basic", "events"),
         (_b("fold_without_waiting", "basic", 1), _b("fold_after_flush", "events", 1))),
    Rule("events.terminal_flushed_before_cleanup", S000, "Events, settlement, and waits",
         "a hop's terminal truth comes first, then its terminal Step, then cleanup: a Step "
         "that did not ride in the settlement is flushed (every Step its writer accepted "
         "written) before the hop goes on to delete its checkpoint, unless an append "
         "failed and the Step is owed to the relay",
         ("terminal_flush_before_cleanup",), ("step_burst",),
         (_b("terminal_left_unflushed", "step_burst", 2),)),
    Rule("events.unwritten_terminal_step_owed", S000, "Events, settlement, and waits",
         "the terminal event is best effort and bounded: when its publish is refused or "
         "gives up at the bound (the writer's queue full behind a stalled append), the "
         "settled hop does not count it published; its terminal Step is written or its boot "
         "owes it as evidence debt when the hop returns (issue 18, M9)",
         ("settled_hop_owes_evidence",), ("publish_bound",),
         (_b("refused_publish_accepted", "publish_bound", 1),)),
    Rule("events.publish_shielded", S000, "Events, settlement, and waits",
         "a hop's publish is shielded (and bounded): a cancellation arriving while the final "
         "node's last publish waits (a graceful shutdown as the node returns) does not lose "
         "the node's outcome; the hop still settles it (issue 18, M9)",
         ("cancelled_hop_keeps_outcome",), ("publish_bound",),
         (_b("publish_unshielded", "publish_bound", 2),)),
    Rule("events.cancel_closes_channel", S000, "Events, settlement, and waits",
         "a cancel's terminal path is a terminal path like a hop's: once CANCELLED "
         "committed, the Run's live channel gets run.cancelled and closes",
         ("cancel_closes_channel",), ("cancel",),
         (_b("channel_left_open_after_cancel", "cancel", 1),)),
    Rule("events.tee_to_live_writer", S000, "Events, settlement, and waits",
         "non-token events are teed by the writer of the hop running the Run: a hop "
         "that parks leaves its channel open for readers with no writer attached",
         ("tee_to_live_writer",), ("consent",), (_b("writer_left_attached", "consent", 1),)),
    Rule("events.tokens_shown_live", S000, "Events, settlement, and waits",
         "token deltas are live-only events on the Run's channel: a hop that streams N "
         "of them shows its readers each one, in order, before its terminal truth (a "
         "chatty Run settled DONE with spoken = N held t0 .. t(N-1) on its channel)",
         ("chatty_tokens_spell_result",), ("runtime_mutation", "events"),
         (_b("token_deltas_dropped", "runtime_mutation", 1),)),
    Rule("events.debt_after_truth", S000, "Events, settlement, and waits",
         "a Run's terminal Step is owed (an evidence debt for the relay) only once its "
         "terminal truth committed: a hop that parks or is fenced owes nothing",
         ("debt_after_truth",), ("consent",), (_b("debt_before_truth", "consent", 1),)),
    Rule("service.settle_on_proof", S000, "Service job attempts",
         "an attempt settles exactly on evidence that proves the outcome: a driver-proved "
         "rejection or no effect fails it, a lookup of the acknowledged job succeeds or fails "
         "it, containment or no effect cancels it",
         ("service_settle_honoured", "service_no_fabricated_failure"),
         ("service", "bad_input"),
         (_b("rejection_not_settled", "service", 1),)),
    Rule("service.resubmit_decision", S000, "Service job attempts",
         "the re-submit decision authorises another transmission exactly on proof about the "
         "attempt it finds: never on proof of no effect once a provider job was acknowledged, "
         "and a same-key replay is not refused for holding one (a worker acting on an old "
         "lookup answer after others recorded the job and found it gone)",
         ("service_resubmit_honoured",), ("resubmit_race",),
         (_b("replay_refused_with_job", "resubmit_race", 5),)),
    Rule("service.bad_input", S000, "Service job attempts",
         "an attempt record that arrives without its binding or its request fails "
         "validation naming the missing field (not an error out of the digest filler), "
         "and a cancel-settle of an attempt just prepared (never sent) on a lookup is "
         "refused: only proof that it was never submitted cancels it; a SUCCEEDED settle "
         "with a forged result on a lookup that found no job is refused too",
         ("bad_input_refused", "service_settle_honoured"), ("bad_input",),
         (_b("attempt_decode_keyerror", "bad_input", 1),
          _b("lookup_cancels_prepared", "bad_input", 1),
          _b("absent_lookup_succeeds", "bad_input", 1))),
    Rule("service.digest_sealed", S000, "Service job attempts",
         "an attempt persists the exact digest of its request, binding and destination: a "
         "record whose digest was sealed over another request is refused before it is "
         "prepared",
         ("service_digest_sealed",), ("service",),
         (_b("attempt_digest_unchecked", "service", 4),)),
    Rule("service.indeterminate", S000, "Service job attempts",
         "a timeout, lost or malformed acknowledgement or absent lookup leaves an attempt "
         "that may have been sent INDETERMINATE with its evidence, never unrecorded (an "
         "absent lookup says truly whether an acknowledged job was lost or the driver "
         "cannot prove absence); terminal truth is kept and a PREPARED attempt is refused",
         ("service_indeterminate_recorded",), ("service",),
         (_b("indeterminate_not_recorded", "service", 1),
          _b("absence_claims_acknowledged_job", "service", 1))),
    Rule("service.running", S000, "Service job attempts",
         "a provider's running report moves a sent attempt with a provider job to RUNNING at "
         "the reported progress; a repeated report of the same progress and a report on a "
         "terminal attempt leave it as it was (no new version); without a provider job it "
         "is refused",
         ("service_running_recorded",), ("service",),
         (_b("running_report_rewritten", "service", 1),)),
    Rule("service.open_pass", S000, "Service job attempts",
         "a pass over the nonterminal attempts (startup, relays) pages through all of them: "
         "each open attempt is reconciled once, none is skipped past the first page",
         ("service_open_pass_complete",), ("service",),
         (_b("open_pass_first_page", "service", 1),)),
    # -- seed 004, leased jobs ---------------------------------------------------------------
    Rule("jobs.fence", S004, "Leases and fences",
         "a result stages only under the job's current fence; a late result from an old fence "
         "never overwrites the newer interpretation",
         ("fence_never_overwritten", "lease_honoured"), ("leased_jobs",),
         (_b("stage_fence", "leased_jobs", 1),)),
    Rule("jobs.attempt_budget", S004, "Bounded retries",
         "at most three worker attempts per interpretation, also across crashes",
         ("job_budgets",), ("leased_jobs",), (_b("attempt_budget_ignored", "leased_jobs", 1),)),
    Rule("jobs.retry_backoff", S004, "Bounded retries",
         "a retryable failure schedules its retry with the policy's bounded exponential "
         "backoff: after attempt n exactly min(60, 5 x 2^(n-1)) s after the failure (a "
         "ledger retry of the call may only eat into that wait, never lengthen it)",
         ("retry_backed_off", "retry_waits_full_backoff"), ("leased_jobs",),
         (_b("retry_backoff_doubled", "leased_jobs", 1),
          _b("retry_backoff_halved", "leased_jobs", 1))),
    Rule("jobs.call_budget", S004, "Alpha.2 accounting",
         "at most two model calls per interpretation, each reserved before it goes out",
         ("job_budgets",), ("leased_jobs",), (_b("call_not_reserved", "leased_jobs", 1),)),
    Rule("jobs.attempt_log", S004, "Alpha.2 accounting",
         "jobs.attempts numbers a job's started, completed, failed and expired-lease events "
         "0, 1, 2, ... in the order they were recorded (an expired lease and the exhaustion "
         "its reclaim records are two events), and every event names a fence the job reached",
         ("attempt_log_numbered",), ("leased_jobs", "bad_input"),
         (_b("attempt_index_from_one", "leased_jobs", 1),
          _b("attempt_event_unvalidated", "bad_input", 1))),
    Rule("jobs.withdraw", S000, "Delegated AgentJob labor",
         "a job its owner withdraws (the delegating Run cancelled) without a live lease is "
         "failed with the owner's reason; a lapsed attempt is closed first, its expired-lease "
         "event numbered before the failure in the job's attempt log",
         ("attempt_log_numbered",), ("withdrawn_jobs",),
         (_b("withdraw_numbered_from_start", "withdrawn_jobs", 1),)),
    Rule("jobs.bad_input", S004, "Durable states",
         "a buggy client's evidence record without a workspace, interpretation record "
         "numbered 0 or under fence -1, attempt event naming interpretation 0, or job policy "
         "with a negative retry base fails "
         "validation naming the field, and its stage or close under a fence no claim "
         "handed out (-1) is refused and "
         "leaves nothing in the attempt log (no event, no usage it never received)",
         ("bad_input_refused", "attempt_log_numbered", "usage_never_fabricated"),
         ("bad_input",), (_b("evidence_workspace_unchecked", "bad_input", 1),
                          _b("interpretation_from_zero", "bad_input", 1),
                          _b("retry_base_negative", "bad_input", 1))),
    Rule("jobs.usage", S004, "Alpha.2 accounting",
         "the attempt log keeps only usage the model returned, under the call that returned "
         "it (a fenced-out result's usage keeps its call's interpretation after a "
         "reprocess), and keeps the usage of an answer that arrived as its lease was lost; "
         "unknown usage is None, never a zero bill",
         ("usage_never_fabricated",), ("leased_jobs", "lapsed_lease"),
         (_b("usage_zero_when_unknown", "leased_jobs", 1),
          _b("refused_usage_relabelled", "leased_jobs", 1))),
    Rule("jobs.lease_refusals", S004, "Leases and fences",
         "a fenced transaction (renew, reserve, stage, close) is refused exactly when its "
         "caller lacks the live lease of the current fence, and says truly why (stale fence, "
         "closed attempt, another owner, lapsed lease); a retry of the very closing after an "
         "ambiguous commit is answered, not refused",
         ("lease_honoured",), ("leased_jobs", "ambiguous_closes"),
         (_b("refusal_always_lease_expired", "leased_jobs", 1),
          _b("repeat_closing_refused", "leased_jobs", 4),
          _b("repeat_closing_refused", "ambiguous_closes", 1))),
    Rule("jobs.lease_renewal", S004, "Leases and fences",
         "a 90 s lease from the claim, renewed at most every 20 s: a due renewal by the holder "
         "extends it by a full term, an earlier one changes nothing",
         ("lease_renewed",), ("leased_jobs",), (_b("renewal_ignored", "leased_jobs", 1),
                                                 _b("claim_half_lease", "leased_jobs", 1))),
    Rule("jobs.context_limit", S004, "Bounded retries",
         "a preserved payload beyond the model's context fails processing without a model "
         "call and keeps its evidence; one that fits is never failed as too large",
         ("payload_fits_context", "evidence_kept"), ("leased_jobs",),
         (_b("size_check_skipped", "leased_jobs", 1),)),
    Rule("jobs.evidence_digest", S004, "Durable states",
         "preserved evidence carries the digest of its own payload: a delivery whose "
         "declared digest differs is refused, never received",
         ("evidence_digest_sealed",), ("leased_jobs",),
         (_b("evidence_digest_of_prefix", "leased_jobs", 1),)),
    Rule("jobs.receipt", S004, "Durable states",
         "a receipt stores evidence and its job once: sent again exactly it answers the "
         "stored job and writes nothing; a job id reused for other work (also the same job "
         "sent again under a newer or older model version), or a job of another "
         "workspace than its evidence, is refused",
         ("receipt_idempotent", "evidence_kept"), ("leased_jobs", "bad_input"),
         (_b("receipt_refuses_repeats", "leased_jobs", 1),
          _b("receipt_takes_newer_version", "bad_input", 1))),
    Rule("jobs.model_version", S004, "Leases and fences",
         "a worker whose model is not the job's hands the attempt back before reserving a "
         "call: no model call is spent on another model version, and its staging is refused",
         ("model_version_matched", "lease_honoured"), ("leased_jobs",),
         (_b("model_version_unchecked", "leased_jobs", 1),)),
    Rule("jobs.reprocess", S004, "Shutdown and supervision",
         "jobs.reprocess of a job whose processing ended starts the next interpretation, "
         "queued and unleased with fresh budgets; older interpretations stay",
         ("reprocess_next_interpretation", "fence_never_overwritten"), ("leased_jobs",),
         (_b("reprocess_keeps_budgets", "leased_jobs", 1),)),
    Rule("hop.outcome", S000, "Admission and exact claim",
         "a hop reports to the broker what it committed (skipped without a claim, settled, "
         "parked or fenced) and never raises out of its handler unless its process died or "
         "it was cancelled",
         ("hop_ends_with_an_outcome", "hop_outcome_truthful"), ("basic", "consent"),
         (_b("claim_reports_won", "basic", 3), _b("park_escapes_hop", "consent", 1))),
    Rule("hop.heartbeat", S000, "Admission and exact claim",
         "a live hop touches its broker job every 30 s, so only an abandoned job is swept "
         "after its 120 s heartbeat",
         ("hop_heartbeat",), ("hardware", "runtime_mutation"),
         (_b("slow_heartbeat", "hardware", 5), _b("heartbeat_stopped", "runtime_mutation", 6))),
    Rule("hop.lane_bounds", S000, "Admission and exact claim",
         "a process runs at most 4 hops at once in its runs lane and 2 in its rites lane",
         ("lane_bounds",), ("hardware",), (_b("wide_lanes", "hardware", 4),)),
    Rule("mutation.claim_gate", S000, "Cancellation, mutation, and recovery",
         "a runtime mutation closes the pre-claim gate and waits for every hop past it "
         "(claiming or claimed) to finish before it proceeds, then reopens the gate; its "
         "drain gives up only while such a hop still runs",
         ("mutation_quiesced", "drain_honest"), ("runtime_mutation",),
         (_b("gate_never_closes", "runtime_mutation", 2),
          _b("claim_outside_drain", "runtime_mutation", 5))),
    # -- rules only real processes show ---------------------------------------------------------
    Rule("shutdown.order", S000, "Cancellation, mutation, and recovery",
         "shutdown stops relays and every worker before shared pools close; a worker stop "
         "that fails leaves the pools live",
         unobservable="the simulator runs one trio loop with memory stores and no pools: "
                      "teardown order of SAQ workers and PostgreSQL pools does not exist there",
         covered_by=("tests/contract/test_saq_adapter.py::"
                     "test_a_task_that_never_ends_fails_the_stop_and_keeps_the_pools",)),
    Rule("jobs.shutdown_drain", S004, "Shutdown and supervision",
         "on SIGINT/SIGTERM the worker loop stops claiming and drains for at most ten seconds; "
         "unfinished leases stay recoverable",
         unobservable="signals and the CLI loop's wall-clock drain bound belong to a real "
                      "`vessel jobs work` process, not to simulated workers",
         covered_by=("tests/restart/test_leased_delegation.py::"
                     "test_sigterm_drains_for_at_most_ten_seconds_and_the_lease_stays_recoverable",
                     "tests/unit/test_jobs_cli.py::"
                     "test_a_stop_lets_the_attempt_in_flight_finish_and_claims_no_more")),
)

BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


def gaps(rule: Rule) -> list[str]:
    """What this rule lacks: empty when it has invariant, scenario and break, or an
    honest unobservable reason with a covering test."""
    if not rule.observable:
        return [] if rule.covered_by else ["no covering test for an unobservable rule"]
    missing = []
    if not rule.invariants:
        missing.append("no invariant")
    if not rule.scenarios:
        missing.append("no scenario")
    if not rule.breaks:
        missing.append("no break")
    return missing


def all_gaps() -> dict[str, list[str]]:
    return {r.id: g for r in RULES if (g := gaps(r))}


def break_names() -> list[str]:
    return sorted({b.name for r in RULES for b in r.breaks})
