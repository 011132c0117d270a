"""The catalogue of named fault points: the crash windows of DESIGN section 5.

Each constant names a moment between two durable steps. Runtime code calls
`await deps.faults.point(NAME, ...)` exactly there; the simulator crashes or
injects at those names and the real-process lifecycle (VESSEL_CRASH_AT)
kills the process at the same names. `CATALOGUE` maps every point to the
window it marks and the recovery the seeds expect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FaultPoint:
    name: str
    window: str
    expected: str


ADMIT_COMMITTED = "admit.committed"
RELEASE_COMMITTED = "release.committed"
PUBLISH_SENT_BEFORE_ACK = "publish.sent_before_ack"
CLAIM_COMMITTED = "claim.committed"
EFFECT_APPLIED = "effect.applied"
SETTLE_TERMINAL_COMMITTED = "settle.terminal_committed"
RECONCILE_STARTED = "reconcile.started"

CATALOGUE: dict[str, FaultPoint] = {
    p.name: p
    for p in (
        FaultPoint(
            ADMIT_COMMITTED,
            "Run QUEUED and delivery seq 0 committed; nothing published yet",
            "PENDING: the relay republishes the same key; HELD with no owner is never handed out",
        ),
        FaultPoint(
            RELEASE_COMMITTED,
            "HELD released to PENDING; nothing published yet",
            "the relay publishes the same key",
        ),
        FaultPoint(
            PUBLISH_SENT_BEFORE_ACK,
            "broker accepted the hop; delivery not yet marked PUBLISHED",
            "the relay probes the key, finds the job and creates no second job",
        ),
        FaultPoint(
            CLAIM_COMMITTED,
            "Run RUNNING and delivery CLAIMED; no node has run",
            "startup fences the pre-boot job and fails the Run as lost",
        ),
        FaultPoint(
            EFFECT_APPLIED,
            "an external effect was applied; the Run is not settled",
            "the Run fails as lost; the effect is never applied twice",
        ),
        FaultPoint(
            SETTLE_TERMINAL_COMMITTED,
            "terminal status committed; evidence and cleanup not yet done",
            "terminal truth stands; the Run never runs again",
        ),
        FaultPoint(
            RECONCILE_STARTED,
            "a new boot began startup reconciliation",
            "the next boot repeats reconciliation from durable state",
        ),
    )
}


class NoFaults:
    """Production default: every point is a no-op."""

    async def point(self, name: str, **context: Any) -> None:
        return None
