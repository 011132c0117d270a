"""Checkpoint cleanup as best-effort debt (seed 000_81a5c720b14d934a.txt,
"Events, settlement, and waits": cleanup failure cannot conceal terminal
truth; "Cancellation, mutation, and recovery": startup retries idempotent
checkpoint deletion).

Deleting a terminal Run's checkpoint only tidies up after truth has
committed, so a failure here never aborts what called it: the checkpoint
that stays behind *is* the durable record of the debt. Startup pages those
debts (never all terminal Runs: runtime.recovery.debts) and tries once; the
relay then pays whatever the ledger still lists as owed
(`Ledger.checkpoint_debts`) on every pass, so a Vessel keeps serving while
one checkpoint resists deletion, and the debt is paid once the storage lets
it.
"""

from __future__ import annotations

import logging
from uuid import UUID

from runtime.seams import Ledger

log = logging.getLogger(__name__)

DEBT_PAGE = 50
"""Checkpoints a relay pass tries to delete at most."""


async def release_checkpoint(ledger: Ledger, run_id: UUID) -> bool:
    """Delete a terminal Run's checkpoint; False (logged, owed) when it failed."""
    try:
        await ledger.delete_checkpoint(run_id)
    except Exception as exc:  # owed: the stored checkpoint is the record of the debt
        log.warning("checkpoint of Run %s not deleted, owed to the relay: %r", run_id, exc)
        return False
    return True


async def pay_cleanup_debt(ledger: Ledger, limit: int = DEBT_PAGE) -> list[UUID]:
    """One bounded retry of owed deletions; returns the Runs still owed."""
    owed = await ledger.checkpoint_debts(limit)
    return [run_id for run_id in owed if not await release_checkpoint(ledger, run_id)]
