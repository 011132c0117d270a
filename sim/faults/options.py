"""Every fault probability in one options model, and the named profiles.

Units: a probability named `*_per_<thing>` is the chance that one such
event is faulted. Times are virtual seconds. `swarm` draws, per seed, a
random subset of fault kinds and their probabilities (swarm testing, as
TigerBeetle's VOPR does), so that rare combinations get explored.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

from sim.faults.plan import FaultKind

Probability = Field(default=0.0, ge=0.0, le=1.0)


class FaultOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    crash_per_point_hit: float = Field(
        default=0.0, ge=0, le=1, description="chance a catalogued fault point crashes the boot"
    )
    crash_per_boot: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a boot crashes at a random time within random_crash_window_s",
    )
    random_crash_window_s: float = Field(default=120.0, gt=0)
    publish_fail_per_publish: float = Probability
    ack_lost_per_publish: float = Field(
        default=0.0, ge=0, le=1, description="publish applied, then the caller sees an error"
    )
    publish_in_flight_s: float = Field(
        default=0.0, ge=0,
        description="with ack_lost: a publish stays in flight up to this long before it lands "
        "(and its acknowledgement is lost), so a cancellation can commit meanwhile",
    )
    ack_in_flight_per_publish: float = Field(
        default=0.0, ge=0, le=1,
        description="a publish lands its job, then its acknowledgement stays in flight up to "
        "ack_in_flight_s, so the publishing task can be cancelled in between",
    )
    ack_in_flight_s: float = Field(
        default=30.0, ge=0, description="longest wait of an acknowledgement in flight",
    )
    duplicate_per_delivery: float = Field(
        default=0.0, ge=0, le=1, description="chance a dequeued hop is delivered twice"
    )
    delay_per_publish: float = Probability
    max_delivery_delay_s: float = Field(default=30.0, ge=0)
    transient_per_transaction: float = Field(
        default=0.0, ge=0, le=1, description="error before commit, nothing applied"
    )
    ambiguous_per_write: float = Field(
        default=0.0, ge=0, le=1, description="write applied, then the caller sees an error"
    )
    latency_per_transaction: float = Probability
    max_latency_s: float = Field(default=2.0, ge=0)
    abort_ack_lost_per_abort: float = Field(
        default=0.0, ge=0, le=1, description="abort applied, then the caller sees an error"
    )
    touch_fail_per_touch: float = Field(
        default=0.0, ge=0, le=1,
        description="a hop's heartbeat touch fails unapplied (swarm does not draw it: the "
        "hardware scenario sets it)",
    )
    actor_slow_per_call: float = Field(
        default=0.0, ge=0, le=1, description="an external actor answers far later than usual"
    )
    actor_fail_per_call: float = Field(
        default=0.0, ge=0, le=1, description="an external actor refuses or fails the call"
    )
    actor_duplicate_per_call: float = Field(
        default=0.0, ge=0, le=1, description="an external actor repeats its verdict or result"
    )
    actor_late_per_call: float = Field(
        default=0.0, ge=0, le=1, description="a verdict or result arrives after a long delay"
    )
    step_stall_per_append: float = Field(
        default=0.0, ge=0, le=1, description="a Step append stalls for up to max_stall_s"
    )
    step_fail_per_append: float = Field(
        default=0.0, ge=0, le=1, description="a Step append fails before commit"
    )
    max_stall_s: float = Field(default=20.0, ge=0)
    outage_per_transaction: float = Field(
        default=0.0, ge=0, le=1,
        description="the database becomes unreachable (every call fails) for up to max_outage_s",
    )
    max_outage_s: float = Field(
        default=20.0, ge=0, description="shorter than runtime.retry.RETRY_BUDGET_S: a blip"
    )
    # -- worker processes: leased jobs (seed 004) and service attempts (seed 000) --
    worker_crash_per_call: float = Field(
        default=0.0, ge=0, le=1,
        description="a worker process dies right after a store write or while a call is out",
    )
    worker_stall_per_call: float = Field(
        default=0.0, ge=0, le=1,
        description="a worker process freezes (no renewals) for longer than its 90 s lease",
    )
    late_result_per_stage: float = Field(
        default=0.0, ge=0, le=1,
        description="a staging request reaches the store only after its lease has lapsed",
    )
    model_hang_per_call: float = Field(
        default=0.0, ge=0, le=1, description="a model call never answers (past the 45 s deadline)"
    )
    model_reply_lost_per_call: float = Field(
        default=0.0, ge=0, le=1,
        description="the model answered (and billed) but the worker never sees the reply",
    )
    model_malformed_per_call: float = Field(
        default=0.0, ge=0, le=1,
        description="the model answers with an output that is not a bundle (a `needs` "
        "that is a number, a list or an unknown name, an unknown field, ...): drawn from "
        "the injector's side stream, so a world that never fires it is unchanged",
    )
    provider_duplicate_per_submit: float = Field(
        default=0.0, ge=0, le=1,
        description="the network delivers a submission twice (same-key replay providers)",
    )
    lookup_lies_per_lookup: float = Field(
        default=0.0, ge=0, le=1,
        description="a provider lookup reports an existing job unknown for a while",
    )
    service_ack_lost_per_call: float = Field(
        default=0.0, ge=0, le=1,
        description="the provider acted on a submit or cancel, then the answer is lost",
    )
    service_timeout_per_call: float = Field(
        default=0.0, ge=0, le=1, description="a provider call never answers (past its deadline)"
    )
    checkpoint_stuck_per_delete: float = Field(
        default=0.0, ge=0, le=1,
        description="a checkpoint deletion fails, and every retry for that Run fails until heal",
    )
    start_unrecorded_per_probe: float = Field(
        default=0.0, ge=0, le=1,
        description="a startup probe of a QUEUED Run's active hop job reports no start time "
        "(and keeps doing so for that boot)",
    )
    delivery_drift_per_read: float = Field(
        default=0.0, ge=0, le=1,
        description="a startup read of a QUEUED Run's delivery row finds it out of step with "
        "the Run (and keeps doing so for that boot)",
    )
    stale_redelivery_per_hop: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a finished hop's old key is delivered again later (up to "
        "max_redelivery_delay_s), after its Run's sequence may have moved on",
    )
    max_redelivery_delay_s: float = Field(default=120.0, ge=0)
    max_startup_faults: int = Field(
        default=3, ge=0,
        description="start_unrecorded and delivery_drift fires per simulation at most: each "
        "may refuse one strict startup, so the refusals end and the world boots again",
    )
    pause_per_point_hit: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a hop pauses at a pause point (sim.pause.PAUSE_POINTS) while an "
        "operator or relay action runs, then resumes",
    )
    max_pause_s: float = Field(default=5.0, ge=0, description="longest wait for the action")
    stall_per_point_hit: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a boot freezes at a catalogued point for longer than its lease "
        "(a zombie: presumed dead, then it resumes)",
    )
    zombie_kill_per_point_hit: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a resumed zombie (its successor already serves) is killed at a "
        "catalogued point: what it settled since it resumed gets no startup after it",
    )
    partition_per_point_hit: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a boot alone loses the database for longer than its lease",
    )
    stall_s: tuple[float, float] = Field(
        default=(40.0, 120.0), description="how long a stall lasts"
    )
    partition_s: tuple[float, float] = Field(
        default=(20.0, 28.0),
        description="how long a partition lasts: past a 15 s boot lease, within the 30 s "
        "retry budget (runtime.retry), so the cut-off boot's hops outlast it and peers fence "
        "them meanwhile",
    )
    max_stalls: int = Field(
        default=2, ge=0, description="stalls and partitions per simulation at most"
    )
    claim_stuck_per_claim: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a claim's delivery is stuck: each claim of it fails before "
        "commit until heal, so its hop gives up and its job fails behind a QUEUED Run "
        "(swarm does not draw it; tuned scenarios set it, drawn from its own stream)",
    )
    slow_reconcile_per_boot: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a boot's startup reconciliation is slow: it stays live and "
        "reachable, but takes slow_reconcile_s longer before the boot serves (swarm does "
        "not draw it: plans and tuned scenarios set it)",
    )
    slow_reconcile_s: tuple[float, float] = Field(
        default=(16.0, 45.0),
        description="how much longer a slow reconciliation takes: past a 15 s boot lease, "
        "so the lease registered before reconciling has run out by the time it is done",
    )
    startup_step_fail_per_append: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a terminal Step append made during a boot's startup "
        "reconciliation fails, so startup owes that evidence to its relay (swarm does not "
        "draw it; the startup_debts scenario sets it, drawn from the injector's side stream)",
    )
    relay_bug_per_pass: float = Field(
        default=0.0, ge=0, le=1,
        description="chance a maintenance relay pass raises past its guards, so the relay "
        "exits and its supervisor restarts it (swarm does not draw it: the relay_bugs "
        "scenario sets it)",
    )
    max_crashes: int = Field(default=6, ge=0, description="crashes per simulation at most")
    restart_delay_s: tuple[float, float] = (1.0, 15.0)

    def enabled(self) -> list[FaultKind]:
        pairs = [
            (FaultKind.CRASH, self.crash_per_point_hit + self.crash_per_boot),
            (FaultKind.PUBLISH_FAIL, self.publish_fail_per_publish),
            (FaultKind.ACK_LOST, self.ack_lost_per_publish),
            (FaultKind.ACK_IN_FLIGHT, self.ack_in_flight_per_publish),
            (FaultKind.DUPLICATE_DELIVERY, self.duplicate_per_delivery),
            (FaultKind.DELAYED_DELIVERY, self.delay_per_publish),
            (FaultKind.LEDGER_TRANSIENT, self.transient_per_transaction),
            (FaultKind.LEDGER_AMBIGUOUS, self.ambiguous_per_write),
            (FaultKind.LEDGER_LATENCY, self.latency_per_transaction),
            (FaultKind.ABORT_ACK_LOST, self.abort_ack_lost_per_abort),
            (FaultKind.TOUCH_FAIL, self.touch_fail_per_touch),
            (FaultKind.ACTOR_SLOW, self.actor_slow_per_call),
            (FaultKind.ACTOR_FAIL, self.actor_fail_per_call),
            (FaultKind.ACTOR_DUPLICATE, self.actor_duplicate_per_call),
            (FaultKind.ACTOR_LATE, self.actor_late_per_call),
            (FaultKind.STEP_STALL, self.step_stall_per_append),
            (FaultKind.STEP_APPEND_FAIL, self.step_fail_per_append),
            (FaultKind.LEDGER_OUTAGE, self.outage_per_transaction),
            (FaultKind.WORKER_CRASH, self.worker_crash_per_call),
            (FaultKind.WORKER_STALL, self.worker_stall_per_call),
            (FaultKind.LATE_RESULT, self.late_result_per_stage),
            (FaultKind.MODEL_HANG, self.model_hang_per_call),
            (FaultKind.MODEL_REPLY_LOST, self.model_reply_lost_per_call),
            (FaultKind.MODEL_MALFORMED, self.model_malformed_per_call),
            (FaultKind.PROVIDER_DUPLICATE, self.provider_duplicate_per_submit),
            (FaultKind.LOOKUP_LIES, self.lookup_lies_per_lookup),
            (FaultKind.SERVICE_ACK_LOST, self.service_ack_lost_per_call),
            (FaultKind.SERVICE_TIMEOUT, self.service_timeout_per_call),
            (FaultKind.CHECKPOINT_STUCK, self.checkpoint_stuck_per_delete),
            (FaultKind.START_UNRECORDED, self.start_unrecorded_per_probe),
            (FaultKind.DELIVERY_DRIFT, self.delivery_drift_per_read),
            (FaultKind.STALE_REDELIVERY, self.stale_redelivery_per_hop),
            (FaultKind.PAUSE, self.pause_per_point_hit),
            (FaultKind.BOOT_STALL, self.stall_per_point_hit),
            (FaultKind.BOOT_PARTITION, self.partition_per_point_hit),
            (FaultKind.ZOMBIE_KILL, self.zombie_kill_per_point_hit),
            (FaultKind.SLOW_RECONCILE, self.slow_reconcile_per_boot),
            (FaultKind.CLAIM_STUCK, self.claim_stuck_per_claim),
            (FaultKind.RELAY_BUG, self.relay_bug_per_pass),
            (FaultKind.STARTUP_STEP_FAIL, self.startup_step_fail_per_append),
        ]
        return [kind for kind, p in pairs if p > 0]


CALM = FaultOptions()

DEFAULT = FaultOptions(
    crash_per_point_hit=0.02,
    crash_per_boot=0.3,
    publish_fail_per_publish=0.05,
    ack_lost_per_publish=0.05,
    duplicate_per_delivery=0.05,
    delay_per_publish=0.05,
    transient_per_transaction=0.01,
    ambiguous_per_write=0.01,
    latency_per_transaction=0.02,
    abort_ack_lost_per_abort=0.1,
    actor_slow_per_call=0.05,
    actor_fail_per_call=0.05,
    actor_duplicate_per_call=0.05,
    actor_late_per_call=0.05,
    step_stall_per_append=0.02,
    step_fail_per_append=0.02,
    worker_crash_per_call=0.01,
    worker_stall_per_call=0.01,
    late_result_per_stage=0.05,
    model_hang_per_call=0.05,
    model_reply_lost_per_call=0.05,
    provider_duplicate_per_submit=0.1,
    lookup_lies_per_lookup=0.1,
    service_ack_lost_per_call=0.1,
    service_timeout_per_call=0.05,
    checkpoint_stuck_per_delete=0.02,
    outage_per_transaction=0.002,
)

PROFILES = ("calm", "default", "swarm")


def swarm(rng: random.Random, more: random.Random | None = None) -> FaultOptions:
    """A random subset of fault kinds with random probabilities, drawn per seed.

    The kinds of worker processes (leased jobs, service attempts) are drawn
    from `more` when given, so adding them did not change what any seed drew
    for the Vessel's kinds (DESIGN section 4: streams kept apart).
    """

    def maybe(high: float, source: random.Random = rng) -> float:
        return source.uniform(0.0, high) if source.random() < 0.5 else 0.0

    extra = rng if more is None else more

    return FaultOptions(
        crash_per_point_hit=maybe(0.08),
        crash_per_boot=maybe(0.6),
        publish_fail_per_publish=maybe(0.2),
        ack_lost_per_publish=maybe(0.2),
        duplicate_per_delivery=maybe(0.2),
        delay_per_publish=maybe(0.2),
        transient_per_transaction=maybe(0.05),
        ambiguous_per_write=maybe(0.05),
        latency_per_transaction=maybe(0.1),
        abort_ack_lost_per_abort=maybe(0.3),
        actor_slow_per_call=maybe(0.2),
        actor_fail_per_call=maybe(0.2),
        actor_duplicate_per_call=maybe(0.2),
        actor_late_per_call=maybe(0.2),
        step_stall_per_append=maybe(0.1),
        step_fail_per_append=maybe(0.1),
        max_crashes=rng.randint(1, 10),
        worker_crash_per_call=maybe(0.06, extra),
        worker_stall_per_call=maybe(0.06, extra),
        late_result_per_stage=maybe(0.3, extra),
        model_hang_per_call=maybe(0.2, extra),
        model_reply_lost_per_call=maybe(0.2, extra),
        provider_duplicate_per_submit=maybe(0.4, extra),
        lookup_lies_per_lookup=maybe(0.3, extra),
        service_ack_lost_per_call=maybe(0.3, extra),
        service_timeout_per_call=maybe(0.2, extra),
        # Drawn last, from `more`: adding it changed no earlier draw of any seed.
        checkpoint_stuck_per_delete=maybe(0.3, extra),
        outage_per_transaction=maybe(0.01, extra),
        # Drawn after every other kind: adding it changed no earlier draw of any seed.
        stale_redelivery_per_hop=maybe(0.1, extra),
        # Drawn after every other kind: adding it changed no earlier draw of any seed.
        model_malformed_per_call=maybe(0.1, extra),
    )


def options_for(
    profile: str, rng: random.Random, more: random.Random | None = None
) -> FaultOptions:
    if profile == "calm":
        return CALM
    if profile == "default":
        return DEFAULT
    if profile == "swarm":
        return swarm(rng, more)
    raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")
