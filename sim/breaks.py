"""Test-only fence breaks: prove the checker can fail.

`SIM_BREAK=<name>` in the environment (or `broken(name)` in-process)
patches the simulated world's memory ledger so that one fence of the run
engine stops holding. Campaigns, replays, shrinks and the gate must then
report a violation. Never used outside tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from uuid import UUID

from runtime.adapters.memory.gate import enter
from runtime.adapters.memory.ledger import MemoryLedger
from runtime.cancel import Canceller
from runtime.models import Claim, DeliveryState, Run, RunStatus
from runtime.recovery.deliveries import DeliveryRecovery, DeliveryVerdict

ENV = "SIM_BREAK"


async def _unfenced_claim(
    self: MemoryLedger, run_id: UUID, seq: int, boot_id: str, token: str, now: datetime
) -> Claim:
    """The claim CAS without its fence: any nonterminal Run, any sequence."""
    await enter()
    run = self.run_table.get(run_id)
    d = self.delivery_table.get((run_id, seq))
    if run is None or d is None or run.status.terminal:
        return Claim(claimed=False, run=run, delivery=d)
    run = self._put_run(run, status=RunStatus.RUNNING, started_at=run.started_at or now,
                        updated_at=now)
    d = self._put_delivery(d, state=DeliveryState.CLAIMED, claimed_boot=boot_id,
                           claim_token=token, updated_at=now)
    return Claim(claimed=True, run=run, delivery=d)


async def _no_containment(self: Canceller, run: Run) -> bool:
    """Cancellation that claims containment without fencing anything."""
    return True


async def _rotate_without_fence(self: DeliveryRecovery, run: Run) -> DeliveryVerdict:
    """Delivery recovery that rotates a pre-boot active job without fencing it first."""
    deps = self.engine.deps
    delivery = await deps.ledger.get_delivery(run.id, run.seq)
    if delivery is None or delivery.state not in (DeliveryState.PENDING, DeliveryState.PUBLISHED):
        return await _ORIGINAL_RECOVER(self, run)
    job = await deps.broker.probe(delivery.key)
    if job is None or not self._pre_boot_active(job.status, job.started_at):
        return await _ORIGINAL_RECOVER(self, run)
    rotated = await deps.ledger.rotate_delivery(run.id, run.seq, deps.clock.now())
    if rotated is not None:
        await self.engine.publish(rotated)
    return DeliveryVerdict.ROTATED


_ORIGINAL_RECOVER = DeliveryRecovery.recover

BREAKS: dict[str, tuple[type, str, object]] = {
    "claim_fence": (MemoryLedger, "claim_delivery", _unfenced_claim),
    "no_containment": (Canceller, "contain", _no_containment),
    "orphan_fence": (DeliveryRecovery, "recover", _rotate_without_fence),
}


@contextmanager
def broken(name: str | None) -> Iterator[None]:
    if not name:
        yield
        return
    if name not in BREAKS:
        raise KeyError(f"unknown break {name!r}; known: {', '.join(BREAKS)}")
    owner, attr, replacement = BREAKS[name]
    original = getattr(owner, attr)
    setattr(owner, attr, replacement)
    try:
        yield
    finally:
        setattr(owner, attr, original)


def from_env() -> str | None:
    return os.environ.get(ENV) or None
