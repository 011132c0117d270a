"""The ledger record of a checkpoint document."""

from __future__ import annotations

from runtime.graph.snapshots import Checkpoint
from runtime.hop import HopContext
from runtime.models import CheckpointRecord


def checkpoint_record(ctx: HopContext, checkpoint: Checkpoint) -> CheckpointRecord:
    """The ledger record of a checkpoint, with the binding of its first pending snapshot."""
    first = checkpoint.first_resumable()
    return CheckpointRecord(
        run_id=ctx.run.id,
        seq=ctx.seq,
        document=checkpoint.document(),
        consent_id=first.consent_id if first else None,
        agent_job_id=first.agent_job_id if first else None,
        service_attempt_id=first.service_attempt_id if first else None,
        updated_at=ctx.deps.clock.now(),
    )
