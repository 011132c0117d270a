"""Startup's terminal debts, read from where they were recorded (seed
000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"; issue 15:
startup in O(work still open)).

Seed 000 has startup repair missing terminal evidence, retry idempotent
checkpoint deletion and re-fence a CANCELLED Run's late hop job. Doing so
by paging every terminal Run ever stored made boot time grow with history.
Each debt is instead recorded durably where it arises, and startup pages
only the debtors:

- evidence: a terminal Run without a terminal Step (`Ledger.evidence_debts`;
  a terminal Step append pays it in its own transaction);
- checkpoint deletion: a terminal Run still holding its checkpoint
  (`Ledger.checkpoint_debts`, paged by Run id);
- late fence: a CANCELLED Run not yet probed for a late hop job
  (`Ledger.late_fence_debts`, recorded by `finish_cancel`); startup settles
  it once the probe saw no waiting job or the abort was acknowledged, and
  keeps it owed (for the next startup) when the fence did not happen.

Every step is best effort: a failure is owed (to the relay, or to the next
startup), never a reason to abort or degrade startup.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from uuid import UUID

from runtime.events.repair import repair_terminal_evidence
from runtime.models import Run
from runtime.publish_fence import LateJob, refence_cancelled
from runtime.recovery.cleanup import release_checkpoint
from runtime.recovery.pages import PAGE_SIZE, paged
from runtime.seams import Deps

log = logging.getLogger(__name__)


@dataclass
class DebtReport:
    repaired: list[UUID] = field(default_factory=list)
    evidence_owed: dict[UUID, int] = field(default_factory=dict)
    cleanup_owed: list[UUID] = field(default_factory=list)
    fences_owed: list[UUID] = field(default_factory=list)


async def pay_startup_debts(deps: Deps, page_size: int = PAGE_SIZE) -> DebtReport:
    """One pass over each recorded terminal debt, in the seed's order."""
    report = DebtReport()
    async for run in paged(deps.ledger.evidence_debts, page_size):
        try:
            if await repair_terminal_evidence(deps, run):
                report.repaired.append(run.id)
        except Exception as exc:  # best effort: still owed, the relay retries
            log.warning("startup: terminal Step of Run %s not repaired: %r", run.id, exc)
            report.evidence_owed[run.id] = run.seq
    report.cleanup_owed = await _release_checkpoints(deps, page_size)
    async for run in paged(deps.ledger.late_fence_debts, page_size):
        if not await _refence(deps, run):
            report.fences_owed.append(run.id)
    return report


async def _release_checkpoints(deps: Deps, page_size: int) -> list[UUID]:
    owed: list[UUID] = []
    after: UUID | None = None
    while True:
        page = await deps.ledger.checkpoint_debts(page_size, after)
        owed += [run_id for run_id in page if not await release_checkpoint(deps.ledger, run_id)]
        if len(page) < page_size:
            return owed
        after = page[-1]


async def _refence(deps: Deps, run: Run) -> bool:
    """True once the late-fence debt is settled; False while it stays owed."""
    try:
        if await refence_cancelled(deps, run) is LateJob.UNFENCED:
            return False
        await deps.ledger.settle_late_fence(run.id)
    except Exception as exc:
        log.warning("startup: late job of Run %s not fenced: %r", run.id, exc)
        return False
    return True
