"""The catalogue of named fault points: the crash windows of DESIGN section 5.

Each constant names a moment between two durable steps. Runtime code calls
`await deps.faults.point(NAME, ...)` exactly there (the standalone leased and
service workers through `ctx.faults` of their context); the simulator crashes or
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
SETTLE_EVIDENCE_WRITTEN = "settle.evidence_written"
RECONCILE_STARTED = "reconcile.started"
SHUTDOWN_STARTED = "shutdown.started"
CONSENT_CHECKPOINT_SAVED = "consent.checkpoint_saved"
CONSENT_ROW_SAVED = "consent.row_saved"
CONSENT_DECIDED = "consent.decided"
READMIT_COMMITTED = "readmit.committed"
DELEGATE_CHECKPOINT_SAVED = "delegate.checkpoint_saved"
DELEGATE_SUBMITTED = "delegate.submitted"
SERVICE_CHECKPOINT_SAVED = "service.checkpoint_saved"
SERVICE_PARKED = "service.parked"
HARDWARE_AWAITING = "hardware.awaiting"
CANCEL_CANCELLING_COMMITTED = "cancel.cancelling_committed"
CANCEL_CONTAINED = "cancel.contained"
JOB_INFERENCE_RETURNED = "job.inference_returned"
SERVICE_SUBMITTED_BEFORE_ACK = "service.submitted_before_ack"

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
            "terminal status committed (with its terminal Step when the hop's Step writer "
            "was idle: one transaction, issue 17); cleanup not yet done",
            "terminal truth stands; a terminal Step not written with it is repaired exactly "
            "once, one written with it is never written again",
        ),
        FaultPoint(
            SETTLE_EVIDENCE_WRITTEN,
            "terminal Step written; checkpoint not yet deleted",
            "startup's cleanup paging deletes the checkpoint; the Run is never revived",
        ),
        FaultPoint(
            CONSENT_CHECKPOINT_SAVED,
            "checkpoint naming a new consent saved; no consent row yet",
            "no consent exists: the Run is contained and fails as lost",
        ),
        FaultPoint(
            CONSENT_ROW_SAVED,
            "checkpoint and consent row saved; the Run is not parked",
            "startup parks AWAITING_CONSENT with exactly that consent",
        ),
        FaultPoint(
            CONSENT_DECIDED,
            "a verdict committed; the Run is not yet re-admitted",
            "the consent relay re-fires the decided consent: one resume",
        ),
        FaultPoint(
            READMIT_COMMITTED,
            "a wait re-admitted the Run with a new PENDING hop; nothing published",
            "the delivery relay publishes that hop; its key is never reused",
        ),
        FaultPoint(
            DELEGATE_CHECKPOINT_SAVED,
            "checkpoint naming a new agent job saved; no job row yet",
            "no job exists: the Run is contained and fails as lost",
        ),
        FaultPoint(
            DELEGATE_SUBMITTED,
            "agent job recorded and submitted; the Run is not parked",
            "startup parks AWAITING_DELEGATE; resumes only on that job's terminal result",
        ),
        FaultPoint(
            SERVICE_CHECKPOINT_SAVED,
            "checkpoint naming a new service attempt saved; no attempt row yet",
            "nothing was sent: the Run is contained and fails as lost",
        ),
        FaultPoint(
            SERVICE_PARKED,
            "Run parked AWAITING_SERVICE on a PREPARED attempt; nothing sent yet",
            "a relay or startup sends the attempt once (CAS to SUBMITTING) and "
            "re-admits the Run only from its proven terminal state",
        ),
        FaultPoint(
            HARDWARE_AWAITING,
            "a live hop waits for hardware (AWAITING_HARDWARE)",
            "the Run fails as lost; its hardware budget is never reset",
        ),
        FaultPoint(
            CANCEL_CANCELLING_COMMITTED,
            "CANCELLING committed; containment not yet acknowledged",
            "startup retries containment; CANCELLED only after it",
        ),
        FaultPoint(
            CANCEL_CONTAINED,
            "containment acknowledged; CANCELLED not yet committed",
            "startup repeats containment and then finishes the cancellation",
        ),
        FaultPoint(
            SHUTDOWN_STARTED,
            "shutdown began: relays and workers are being stopped",
            "the next boot reconciles whatever the dying boot left in flight",
        ),
        FaultPoint(
            RECONCILE_STARTED,
            "a new boot began startup reconciliation",
            "the next boot repeats reconciliation from durable state",
        ),
        FaultPoint(
            JOB_INFERENCE_RETURNED,
            "a leased worker's model call returned (call budget reserved); nothing staged yet",
            "the lease lapses and a newer fence takes the job; the late result from the old "
            "fence never lands; the reserved call stays consumed",
        ),
        FaultPoint(
            SERVICE_SUBMITTED_BEFORE_ACK,
            "the provider acknowledged a submission; the attempt is SUBMITTING without its "
            "provider job id",
            "the attempt stays SUBMITTING/INDETERMINATE; reconciliation adopts the job by "
            "lookup; never resubmitted blindly",
        ),
    )
}


class NoFaults:
    """Production default: every point is a no-op."""

    async def point(self, name: str, **context: Any) -> None:
        return None
