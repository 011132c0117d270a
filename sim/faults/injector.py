"""The Injector decides, at each hit of a fault point, whether a fault fires.

With a plan it fires exactly the planned (point, nth) and time triggers;
with options it rolls the fault stream and records every fired fault as a
plan entry, so any profile run can be replayed and shrunk as a plan.
Coverage counts hits and fires per point and fires per kind.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from sim.faults import struck
from sim.faults.options import FaultOptions
from sim.faults.plan import AtPoint, AtTime, FaultKind, FaultPlan, PlannedFault

CRASH_KINDS = (FaultKind.CRASH, FaultKind.WORKER_CRASH)
"""Both count against `max_crashes`."""
STARTUP_KINDS = (FaultKind.START_UNRECORDED, FaultKind.DELIVERY_DRIFT)
"""Both count against `max_startup_faults`: a strict startup refuses on each, and a
world whose every boot were refused would never serve again."""
STALL_KINDS = (FaultKind.BOOT_STALL, FaultKind.BOOT_PARTITION)
"""Both count against `max_stalls`."""


@dataclass
class Coverage:
    hits: Counter[str] = field(default_factory=Counter)
    fires: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {
            "hits": dict(sorted(self.hits.items())),
            "fires": dict(sorted(self.fires.items())),
            "kinds": dict(sorted(self.kinds.items())),
        }


PROBABILITY_OPTION: dict[FaultKind, str] = {
    FaultKind.CRASH: "crash_per_point_hit",
    FaultKind.PUBLISH_FAIL: "publish_fail_per_publish",
    FaultKind.ACK_LOST: "ack_lost_per_publish",
    FaultKind.ACK_IN_FLIGHT: "ack_in_flight_per_publish",
    FaultKind.DUPLICATE_DELIVERY: "duplicate_per_delivery",
    FaultKind.DELAYED_DELIVERY: "delay_per_publish",
    FaultKind.LEDGER_TRANSIENT: "transient_per_transaction",
    FaultKind.LEDGER_AMBIGUOUS: "ambiguous_per_write",
    FaultKind.LEDGER_LATENCY: "latency_per_transaction",
    FaultKind.ABORT_ACK_LOST: "abort_ack_lost_per_abort",
    FaultKind.TOUCH_FAIL: "touch_fail_per_touch",
    FaultKind.ACTOR_SLOW: "actor_slow_per_call",
    FaultKind.ACTOR_FAIL: "actor_fail_per_call",
    FaultKind.ACTOR_DUPLICATE: "actor_duplicate_per_call",
    FaultKind.ACTOR_LATE: "actor_late_per_call",
    FaultKind.STEP_STALL: "step_stall_per_append",
    FaultKind.STEP_APPEND_FAIL: "step_fail_per_append",
    FaultKind.LEDGER_OUTAGE: "outage_per_transaction",
    FaultKind.WORKER_CRASH: "worker_crash_per_call",
    FaultKind.WORKER_STALL: "worker_stall_per_call",
    FaultKind.LATE_RESULT: "late_result_per_stage",
    FaultKind.MODEL_HANG: "model_hang_per_call",
    FaultKind.MODEL_REPLY_LOST: "model_reply_lost_per_call",
    FaultKind.MODEL_MALFORMED: "model_malformed_per_call",
    FaultKind.PROVIDER_DUPLICATE: "provider_duplicate_per_submit",
    FaultKind.LOOKUP_LIES: "lookup_lies_per_lookup",
    FaultKind.SERVICE_ACK_LOST: "service_ack_lost_per_call",
    FaultKind.SERVICE_TIMEOUT: "service_timeout_per_call",
    FaultKind.CHECKPOINT_STUCK: "checkpoint_stuck_per_delete",
    FaultKind.START_UNRECORDED: "start_unrecorded_per_probe",
    FaultKind.DELIVERY_DRIFT: "delivery_drift_per_read",
    FaultKind.STALE_REDELIVERY: "stale_redelivery_per_hop",
    FaultKind.PAUSE: "pause_per_point_hit",
    FaultKind.BOOT_STALL: "stall_per_point_hit",
    FaultKind.BOOT_PARTITION: "partition_per_point_hit",
    FaultKind.ZOMBIE_KILL: "zombie_kill_per_point_hit",
    FaultKind.SLOW_RECONCILE: "slow_reconcile_per_boot",
    FaultKind.CLAIM_STUCK: "claim_stuck_per_claim",
    FaultKind.RELAY_BUG: "relay_bug_per_pass",
    FaultKind.STARTUP_STEP_FAIL: "startup_step_fail_per_append",
}
"""The option that gives each fault kind its probability per opportunity."""
SIDE_KINDS = frozenset({FaultKind.CLAIM_STUCK, FaultKind.MODEL_MALFORMED,
                        FaultKind.STARTUP_STEP_FAIL})
"""Kinds drawn from the injector's `side` stream, not the fault stream: a world whose
draws never fire one runs exactly as it did before the kind existed. (Claims and
startup Steps are the Vessel's, model calls the leased workers'; no scenario sets
both claim_stuck_per_claim and startup_step_fail_per_append.)"""


@dataclass
class Injector:
    options: FaultOptions
    rng: random.Random
    plan: FaultPlan | None = None
    side: random.Random | None = None
    """The stream of SIDE_KINDS (the fault stream itself when None)."""
    healed: bool = False
    crashes: int = 0
    startup_faults: int = 0
    stalls: int = 0
    fired: list[PlannedFault] = field(default_factory=list)
    coverage: Coverage = field(default_factory=Coverage)

    def __post_init__(self) -> None:
        self._planned: dict[tuple[str, int], list[PlannedFault]] = {}
        for pf in self.plan.faults if self.plan else ():
            if isinstance(pf.trigger, AtPoint):
                self._planned.setdefault((pf.trigger.point, pf.trigger.nth), []).append(pf)

    def probability(self, kind: FaultKind, point: str) -> float:
        value: float = getattr(self.options, PROBABILITY_OPTION[kind])
        return value

    def _amount(self, kind: FaultKind) -> float:
        if kind is FaultKind.LEDGER_LATENCY:
            return round(self.rng.uniform(0.0, self.options.max_latency_s), 3)
        if kind is FaultKind.ACK_LOST and self.options.publish_in_flight_s > 0:
            return round(self.rng.uniform(0.0, self.options.publish_in_flight_s), 3)
        if kind is FaultKind.ACK_IN_FLIGHT:
            return round(self.rng.uniform(0.0, self.options.ack_in_flight_s), 3)
        if kind is FaultKind.DELAYED_DELIVERY:
            return round(self.rng.uniform(0.0, self.options.max_delivery_delay_s), 3)
        if kind is FaultKind.LEDGER_OUTAGE:
            return round(self.rng.uniform(1.0, max(1.0, self.options.max_outage_s)), 3)
        if kind is FaultKind.STEP_STALL:
            return round(self.rng.uniform(0.0, self.options.max_stall_s), 3)
        if kind in (FaultKind.ACTOR_SLOW, FaultKind.ACTOR_LATE):
            return round(self.rng.uniform(30.0, 300.0), 3)
        if kind in (FaultKind.WORKER_STALL, FaultKind.LATE_RESULT):
            # Longer than the 90 s lease of seed 004, so another worker can reclaim.
            return round(self.rng.uniform(100.0, 400.0), 3)
        if kind is FaultKind.STALE_REDELIVERY:
            return round(self.rng.uniform(0.0, self.options.max_redelivery_delay_s), 3)
        if kind is FaultKind.LOOKUP_LIES:
            return round(self.rng.uniform(20.0, 300.0), 3)
        if kind is FaultKind.PAUSE:
            return round(self.rng.uniform(0.0, self.options.max_pause_s), 3)
        if kind is FaultKind.BOOT_STALL:
            return round(self.rng.uniform(*self.options.stall_s), 3)
        if kind is FaultKind.BOOT_PARTITION:
            return round(self.rng.uniform(*self.options.partition_s), 3)
        if kind is FaultKind.SLOW_RECONCILE:
            return round(self.rng.uniform(*self.options.slow_reconcile_s), 3)
        return 0.0

    def _action(self, kind: FaultKind) -> str | None:
        if kind is not FaultKind.PAUSE:
            return None
        from sim.pause import ACTIONS

        return self.rng.choice(ACTIONS).value

    def hit(self, point: str, kinds: tuple[FaultKind, ...]) -> PlannedFault | None:
        """Count a hit of `point`; return the fault that fires there, if any."""
        self.coverage.hits[point] += 1
        if self.healed:
            return None
        nth = self.coverage.hits[point]
        if self.plan is not None:
            chosen = next(
                (pf for pf in self._planned.get((point, nth), []) if pf.fault in kinds), None
            )
        else:
            chosen = self._roll(point, nth, kinds)
        if chosen is not None:
            self._record(chosen, point)
        return chosen

    def _roll(self, point: str, nth: int, kinds: tuple[FaultKind, ...]) -> PlannedFault | None:
        for kind in kinds:
            p = self.probability(kind, point)
            source = self.side if kind in SIDE_KINDS and self.side is not None else self.rng
            if p > 0 and source.random() < p:
                if kind in CRASH_KINDS and self.crashes >= self.options.max_crashes:
                    continue
                if kind in STARTUP_KINDS and \
                        self.startup_faults >= self.options.max_startup_faults:
                    continue
                if kind in STALL_KINDS and self.stalls >= self.options.max_stalls:
                    continue
                return PlannedFault(
                    trigger=AtPoint(point=point, nth=nth), fault=kind, amount=self._amount(kind),
                    action=self._action(kind),
                )
        return None

    def _record(self, pf: PlannedFault, point: str) -> None:
        self.fired.append(pf)
        struck.note(point, pf.fault.value)
        self.coverage.fires[point] += 1
        self.coverage.kinds[pf.fault.value] += 1
        if pf.fault in CRASH_KINDS:
            self.crashes += 1
        if pf.fault in STARTUP_KINDS:
            self.startup_faults += 1
        if pf.fault in STALL_KINDS:
            self.stalls += 1

    # -- time-triggered crashes --------------------------------------------

    def planned_times(self) -> list[float]:
        if self.plan is None:
            return []
        return sorted(
            pf.trigger.at
            for pf in self.plan.faults
            if isinstance(pf.trigger, AtTime) and pf.fault is FaultKind.CRASH
        )

    def roll_boot_crash(self, now: float) -> float | None:
        """Profile mode: maybe schedule a crash of the boot starting at `now`."""
        if self.plan is not None or self.healed:
            return None
        p = self.options.crash_per_boot
        if p > 0 and self.rng.random() < p:
            return round(now + self.rng.uniform(0.0, self.options.random_crash_window_s), 3)
        return None

    def time_crash_fires(self, at: float) -> bool:
        if self.healed or (self.plan is None and self.crashes >= self.options.max_crashes):
            return False
        point = "time.crash"
        self.coverage.hits[point] += 1
        self._record(PlannedFault(trigger=AtTime(at=at), fault=FaultKind.CRASH), point)
        return True

    def recorded_plan(self) -> FaultPlan:
        return FaultPlan(faults=list(self.fired))
