"""The `Event` record of a Run's channel, its kinds, and the bounds of the bus.

Seed 000_81a5c720b14d934a.txt, "Events, settlement, and waits": the bus
detaches mutable event metadata at every replay, subscriber, snapshot and
persistence boundary. An `Event` is frozen, but its `data` dict is still a
mutable object, so every boundary hands out `Event.detached()`: a copy whose
`data` is a deep copy that shares nothing with the channel's own record.
"""

from __future__ import annotations

import copy
import enum
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

REPLAY_LIMIT = 256
"""At most this many events are kept for replay per Run channel (seed 000)."""

QUEUE_LIMIT = 256
"""At most this many undelivered events are queued per live subscriber (seed 000)."""

CLOSE_GRACE_S = 5.0
"""How long a channel waits after its terminal event for subscribers to drain."""


class EventKind(enum.StrEnum):
    """The semantic lifecycle kinds the engine publishes (other kinds are allowed)."""

    RUN_CLAIMED = "run.claimed"
    NODE_STARTED = "node.started"
    NODE_COMPLETED = "node.completed"
    TOKEN = "token"
    RUN_PARKED = "run.parked"
    RUN_DONE = "run.done"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    RESYNC = "resync"


TERMINAL_KINDS: frozenset[str] = frozenset(
    {EventKind.RUN_DONE, EventKind.RUN_FAILED, EventKind.RUN_CANCELLED}
)


LIVE_ONLY_KINDS: frozenset[str] = frozenset({EventKind.TOKEN, EventKind.RESYNC})
"""Kinds never written as Step rows: token deltas and per-reader resync boundaries."""


class Event(BaseModel):
    """One event of a Run's channel.

    `cursor` is the channel's monotonic position (the first event has cursor
    1; 0 means "nothing yet"). A `resync` event is produced for one reader
    only: its cursor is the boundary it replaces everything through, and its
    `data["snapshot"]` is the Run's authoritative record at that moment.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: UUID
    cursor: int = Field(ge=0)
    kind: str = Field(min_length=1)
    data: dict[str, Any] = Field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        """True for run.done, run.failed and run.cancelled: the channel's last event."""
        return self.kind in TERMINAL_KINDS

    @property
    def persisted(self) -> bool:
        """True when the Step writer writes this event as a Step row."""
        return self.kind not in LIVE_ONLY_KINDS

    def detached(self) -> Event:
        """A copy whose metadata shares no mutable object with this one."""
        return self.model_copy(update={"data": detach(self.data)})


_T = TypeVar("_T")
_ATOMS = frozenset({str, int, float, bool, type(None)})


def detach(value: _T) -> _T:
    """A deep copy of `value`: dicts and lists of plain values are rebuilt
    directly (event metadata is JSON-shaped, and copy.deepcopy's memo
    bookkeeping cost more than the copy itself), anything else goes through
    copy.deepcopy. A dict or list reached twice is copied twice, which no
    reader can tell apart from a shared copy of immutable content."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {k: detach(v) for k, v in value.items()}  # type: ignore[attr-defined,return-value]
    if kind is list:
        return [detach(v) for v in value]  # type: ignore[attr-defined,return-value]
    return copy.deepcopy(value)
