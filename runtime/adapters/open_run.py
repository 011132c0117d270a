"""Failing an open Run under a compare-and-set: one decision for both ledgers.

`fail_orphan` (recovery fails a live Run that another boot claimed) and
`fail_abandoned` (this boot fails its own exact claim, whose job ended without
settling) read the same two rows, the Run and its current delivery, and differ
only in the claim they are fenced by. Each ledger reads or locks those rows,
asks `decide`, and writes the Run FAILED with the reason and its delivery
FAILED only on `Verdict.FAIL`. `Verdict.REPEATED` hands back the stored Run,
so a failure repeated after an ambiguous commit reports it again and a
recovery pass that runs twice fails its orphan once (seed
000_81a5c720b14d934a.txt: orphaned RUNNING or AWAITING_HARDWARE work is failed
as lost).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from runtime.models import DeliveryState, Run, RunDelivery, RunStatus

OPEN_STATUSES = (RunStatus.RUNNING, RunStatus.AWAITING_HARDWARE)
"""The statuses a claimed Run may be failed from: a hop holds it or parked it on hardware."""


class Verdict(Enum):
    REFUSED = "refused"
    """Nothing is written; the call answers None."""
    REPEATED = "repeated"
    """The same failure is stored already; the call answers the stored Run."""
    FAIL = "fail"
    """Write the Run and its delivery FAILED."""


class ClaimFence(Protocol):
    """The claim a failure is conditional on."""

    def concerns(self, delivery: RunDelivery) -> bool:
        """The delivery is the one this call may fail at all."""

    def repeated(self, delivery: RunDelivery) -> bool:
        """With the Run FAILED for the same reason, the delivery shows this failure."""

    def open(self, delivery: RunDelivery) -> bool:
        """The delivery is still open to this failure."""


@dataclass(frozen=True)
class OrphanFence:
    """A Run claimed by any boot but `boot_id`, the boot that recovers it."""

    boot_id: str

    def concerns(self, delivery: RunDelivery) -> bool:
        return True

    def repeated(self, delivery: RunDelivery) -> bool:
        return True

    def open(self, delivery: RunDelivery) -> bool:
        return delivery.claimed_boot != self.boot_id


@dataclass(frozen=True)
class AbandonedFence:
    """Exactly the claim `claim_token`, still CLAIMED."""

    claim_token: str

    def concerns(self, delivery: RunDelivery) -> bool:
        return delivery.claim_token == self.claim_token

    def repeated(self, delivery: RunDelivery) -> bool:
        return delivery.state is DeliveryState.FAILED

    def open(self, delivery: RunDelivery) -> bool:
        return delivery.state is DeliveryState.CLAIMED


def decide(
    run: Run | None, delivery: RunDelivery | None, seq: int, reason: str, fence: ClaimFence
) -> Verdict:
    """Whether the Run at generation `seq` is failed for `reason` under `fence`."""
    if run is None or delivery is None or run.seq != seq or not fence.concerns(delivery):
        return Verdict.REFUSED
    if run.status is RunStatus.FAILED and run.error == reason and fence.repeated(delivery):
        return Verdict.REPEATED
    if run.status not in OPEN_STATUSES or not fence.open(delivery):
        return Verdict.REFUSED
    return Verdict.FAIL
