"""Fault plans: a list of (trigger, fault) pairs, JSON round-trippable.

A trigger is a fault point and its nth hit, or a virtual time. Points are
the runtime's catalogued crash windows (runtime.faults) and the seam
operations the injectors wrap (`ledger.<method>`, `broker.publish`,
`broker.deliver`; for worker processes `jobs.<method>`, `model.extract`,
`service.<method>`, `service.driver.<call>`). A plan recorded from a
profile run replays the same faults exactly; `harness shrink` edits plans.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class FaultKind(enum.StrEnum):
    CRASH = "crash"
    PUBLISH_FAIL = "publish_fail"
    ACK_LOST = "ack_lost"
    ACK_IN_FLIGHT = "ack_in_flight"
    """A publish landed its job, and its acknowledgement (or the error of a lost one) takes
    `amount` seconds to come back: a cancellation of the publishing task (a graceful
    shutdown) can arrive in between (seed 000, "Cancellation, mutation, and recovery")."""
    DUPLICATE_DELIVERY = "duplicate_delivery"
    DELAYED_DELIVERY = "delayed_delivery"
    LEDGER_TRANSIENT = "ledger_transient"
    LEDGER_AMBIGUOUS = "ledger_ambiguous"
    LEDGER_LATENCY = "ledger_latency"
    ABORT_ACK_LOST = "abort_ack_lost"
    TOUCH_FAIL = "touch_fail"
    """A hop's heartbeat touch of its broker job fails and is not applied (the broker is
    briefly unreachable); the hop must go on and touch again next period."""
    ACTOR_SLOW = "actor_slow"
    ACTOR_FAIL = "actor_fail"
    ACTOR_DUPLICATE = "actor_duplicate"
    ACTOR_LATE = "actor_late"
    STEP_STALL = "step_stall"
    STEP_APPEND_FAIL = "step_append_fail"
    STARTUP_STEP_FAIL = "startup_step_fail"
    """A terminal Step append made while this boot reconciles (startup's evidence repair,
    a Step startup writes after failing or cancelling a Run) fails: the debt startup
    could not pay is owed to this boot's relay, which must pay it while the boot lives
    (seed 000, "Cancellation, mutation, and recovery": a failure is owed, never fatal)."""
    LEDGER_OUTAGE = "ledger_outage"
    """The database is unreachable for `amount` seconds from this call on (a restart)."""
    # Leased job workers (seed 004) and service attempts (seed 000, "Service job attempts").
    WORKER_CRASH = "worker_crash"
    WORKER_STALL = "worker_stall"
    LATE_RESULT = "late_result"
    MODEL_HANG = "model_hang"
    MODEL_REPLY_LOST = "model_reply_lost"
    MODEL_MALFORMED = "model_malformed"
    """The model answers (and bills) with an output that is not a bundle (sim.leased
    MALFORMED): the worker must fail the job as invalid model output, staging nothing."""
    PROVIDER_DUPLICATE = "provider_duplicate"
    LOOKUP_LIES = "lookup_lies"
    SERVICE_ACK_LOST = "service_ack_lost"
    SERVICE_TIMEOUT = "service_timeout"
    # Best-effort cleanup (seed 000, "Events, settlement, and waits").
    CHECKPOINT_STUCK = "checkpoint_stuck"
    # Startup's degraded triggers (seed 000, "Cancellation, mutation, and recovery"):
    # one boot's view of a QUEUED Run, for that boot's life (until heal).
    START_UNRECORDED = "start_unrecorded"
    """The broker reports the Run's hop job active without a start time."""
    DELIVERY_DRIFT = "delivery_drift"
    """The Run's current delivery row reads out of step with it (CLAIMED, SETTLED, FAILED)."""
    STALE_REDELIVERY = "stale_redelivery"
    """A finished hop's key is delivered to a worker again `amount` seconds later (a stale
    duplicate job), typically after its Run's sequence moved on (seed 000, exact claim)."""
    # Pause here, act, resume (sim.pause): the hop waits at its point while an
    # operator or relay action (`PlannedFault.action`) runs, for at most `amount` s.
    PAUSE = "pause"
    # Zombie and partitioned incarnations (issue 15 item 1, issue 18 item 2): the
    # boot is presumed dead while it is unreachable for `amount` s, then goes on.
    BOOT_STALL = "boot_stall"
    """The boot freezes (every seam call waits), so its lease lapses; a successor starts."""
    BOOT_PARTITION = "boot_partition"
    """Only this boot loses the database (its ledger calls fail) for `amount` s."""
    ZOMBIE_KILL = "zombie_kill"
    """A zombie that resumed after its successor started is killed at a catalogued point
    (its supervisor finally ends the old process): whatever it began since it resumed is
    left to the relays of the boots still serving, no startup follows for it."""
    CLAIM_STUCK = "claim_stuck"
    """Every claim of this one delivery (its Run and sequence) fails before commit (a row
    lock held elsewhere, a statement timeout) until heal: the hop's retries give up, its
    job fails while the Run still waits QUEUED at that sequence, and recovery must rotate
    it to a fresh one (seed 000, "Cancellation, mutation, and recovery": the relay)."""
    SLOW_RECONCILE = "slow_reconcile"
    """This boot's startup reconciliation takes `amount` s longer (a backlog, a slow link
    of its own): it stays live and reachable, but the lease it registered before
    reconciling may run out before it serves (seed 000, "Cancellation, mutation, and
    recovery": startup reconciliation; issue 18 item 5, boots.renewed_before_serving)."""
    RELAY_BUG = "relay_bug"
    """A maintenance relay pass raises past its per-step guards (a bug of the relay loop
    itself, not of one Run): the relay exits before shutdown, and the lifespan supervisor
    must restart it after its backoff (seed 000, "Cancellation, mutation, and recovery";
    sim.faults.relay_bug)."""


class AtPoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["point"] = "point"
    point: str
    nth: int = Field(ge=1)


class AtTime(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["time"] = "time"
    at: float = Field(ge=0)


Trigger = Annotated[AtPoint | AtTime, Field(discriminator="kind")]


class PlannedFault(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    trigger: Trigger
    fault: FaultKind
    amount: float = Field(default=0.0, ge=0, description="seconds, for latency and delay")
    action: str | None = Field(
        default=None, description="for a pause: the action fired meanwhile (sim.pause.Action)"
    )

    def describe(self) -> str:
        t = self.trigger
        where = f"{t.point}#{t.nth}" if isinstance(t, AtPoint) else f"t={t.at:g}s"
        extra = f" {self.amount:g}s" if self.amount else ""
        act = f" {self.action}" if self.action else ""
        return f"{self.fault.value}{act}{extra} @ {where}"


class FaultPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    faults: list[PlannedFault] = Field(default_factory=list)

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> FaultPlan:
        return cls.model_validate_json(path.read_text())
