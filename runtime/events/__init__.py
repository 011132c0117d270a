"""The per-Run event bus and the ordered Step writer.

Spec: seed 000_81a5c720b14d934a.txt, "Events, settlement, and waits" (first
two paragraphs). `perform_run` publishes a Run's semantic lifecycle events
on the Run's channel; readers tail it live; an ordered tee writes every
non-token event as a Step row; terminal paths flush that tee before the
channel closes. Everything here is process-local and bounded; the Step rows
are the only durable part, and they are durable best effort.

API
---
`Event` (frozen): `run_id`, `cursor` (1, 2, ... per channel), `kind`
(`EventKind`: run.claimed, node.started, node.completed, token, run.parked,
run.done, run.failed, run.cancelled, resync), `data`; `.terminal`,
`.persisted`, `.detached()` (deep copy).

`EventBus()`: `open(run_id, snapshot, sink=None) -> RunChannel` (reuses
the open channel), `get(run_id)`, `discard(run_id, channel=None)`,
`await close(run_id, grace=5.0)` (close, then discard).

`RunChannel(run_id, snapshot, sink=None)`: `await publish(kind, data) ->
Event`; `subscribe(after_cursor=0) -> Subscription` (an async iterator and
async context manager of detached events: replay then live; a too-old
cursor or an overflowing reader gets one `resync` event whose
`data["snapshot"]` is `snapshot()`, then live; ends after the terminal
event); `attach(sink)`; `await close(grace=5.0)`; `cursor`, `terminal`,
`replay_window`, `closed`. `snapshot` is a synchronous callable returning
the Run's current authoritative record as a dict.

`StepWriter(ledger, clock, run_id, seq)`: `async with` runs its one writer
task; `await write(event)` (the channel's `sink`; tokens ignored; waits
when its 256-item queue is full); `await barrier()`; `await repair(kind,
data) -> Step`; `generation`, `failure`.

Errors (`runtime.events.errors`, all `RuntimeEngineError`):
`CursorFromFuture` / `InvalidCursor`, `EventAfterTerminal`, `ReservedKind`,
`ChannelClosed`, `CapacityExceeded`, `StepWriteFailed` (`.error` is the
original exception, `.generation`, `.kind`), `StepWriterClosed`.

Wiring a hop (the intended use)::

    async with StepWriter(deps.ledger, deps.clock, run.id, seq) as writer:
        channel = bus.open(run.id, current_run_record, sink=writer)
        await channel.publish(EventKind.RUN_CLAIMED, {...})
        ...                                   # nodes publish node.* and token events
        # terminal Run truth commits first (settle_run), then:
        await channel.publish(EventKind.RUN_DONE, {...})
        try:
            await writer.barrier()            # the terminal Step is written, not just queued
        except StepWriteFailed:
            ...                               # evidence debt: repair later; Run truth stands
        finally:
            await bus.close(run.id)           # drain readers or 5 s grace, then discard

Repair (startup or a single-flight relay, after confirming terminal truth)::

    async with StepWriter(deps.ledger, deps.clock, run.id, run.seq) as writer:
        await writer.repair("run.done", {...})   # fresh generation, one attempt
"""

from runtime.events.bus import MAX_CHANNELS, EventBus
from runtime.events.channel import (
    MAX_SUBSCRIBERS,
    EventSink,
    ResyncReason,
    RunChannel,
    SnapshotSource,
    Subscription,
)
from runtime.events.errors import (
    CapacityExceeded,
    ChannelClosed,
    CursorFromFuture,
    EventAfterTerminal,
    EventError,
    InvalidCursor,
    ReservedKind,
    StepWriteFailed,
    StepWriterClosed,
)
from runtime.events.model import (
    CLOSE_GRACE_S,
    LIVE_ONLY_KINDS,
    QUEUE_LIMIT,
    REPLAY_LIMIT,
    TERMINAL_KINDS,
    Event,
    EventKind,
)
from runtime.events.writer import WRITER_QUEUE_LIMIT, StepLedger, StepWriter

__all__ = [
    "CLOSE_GRACE_S",
    "LIVE_ONLY_KINDS",
    "MAX_CHANNELS",
    "MAX_SUBSCRIBERS",
    "QUEUE_LIMIT",
    "REPLAY_LIMIT",
    "TERMINAL_KINDS",
    "WRITER_QUEUE_LIMIT",
    "CapacityExceeded",
    "ChannelClosed",
    "CursorFromFuture",
    "Event",
    "EventAfterTerminal",
    "EventBus",
    "EventError",
    "EventKind",
    "EventSink",
    "InvalidCursor",
    "ReservedKind",
    "ResyncReason",
    "RunChannel",
    "SnapshotSource",
    "StepLedger",
    "StepWriteFailed",
    "StepWriter",
    "StepWriterClosed",
    "Subscription",
]
