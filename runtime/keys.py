"""Hop keys: the broker identity of one exact delivery.

The key `run:<run_id>:<enqueue_seq>` names one delivery generation of a Run
(seed 000_81a5c720b14d934a.txt, "Admission and exact claim"). A key is never
reused for different work: a new hop always gets a new sequence.
"""

from __future__ import annotations

from uuid import UUID

PREFIX = "run"


def hop_key(run_id: UUID, seq: int) -> str:
    return f"{PREFIX}:{run_id}:{seq}"


def parse_hop_key(key: str) -> tuple[UUID, int]:
    """Inverse of `hop_key`; raises ValueError for anything else."""
    prefix, _, rest = key.partition(":")
    run_part, _, seq_part = rest.rpartition(":")
    if prefix != PREFIX or not run_part or not seq_part.isdigit():
        raise ValueError(f"not a hop key: {key!r}")
    return UUID(run_part), int(seq_part)
