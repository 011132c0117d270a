"""EventBus: the process-local registry of Run channels.

Nothing here is durable (seed 000_81a5c720b14d934a.txt, "Events, settlement,
and waits": the Step rows are the durable evidence, the bus is a live
stream). A channel lives from the first hop that opens it until its owner
closes and discards it; a later hop of the same Run in this process reuses
the channel while it is open, so readers keep one cursor sequence.
"""

from __future__ import annotations

from uuid import UUID

from runtime.events.channel import MAX_SUBSCRIBERS, EventSink, RunChannel, SnapshotSource
from runtime.events.errors import CapacityExceeded
from runtime.events.model import CLOSE_GRACE_S, QUEUE_LIMIT, REPLAY_LIMIT

MAX_CHANNELS = 4096
"""Open channels per process; closed channels are evicted before this refuses."""


class EventBus:
    """Channels by run_id: `open`, `get`, `discard`, `close`."""

    def __init__(
        self,
        *,
        max_channels: int = MAX_CHANNELS,
        replay_limit: int = REPLAY_LIMIT,
        queue_limit: int = QUEUE_LIMIT,
        max_subscribers: int = MAX_SUBSCRIBERS,
    ) -> None:
        self._channels: dict[UUID, RunChannel] = {}
        self._max_channels = max_channels
        self._replay_limit = replay_limit
        self._queue_limit = queue_limit
        self._max_subscribers = max_subscribers

    def open(
        self, run_id: UUID, snapshot: SnapshotSource, *, sink: EventSink | None = None
    ) -> RunChannel:
        """The Run's open channel, created if absent or closed.

        On an existing open channel the newest owner's snapshot source (and
        sink, when given) replace the previous ones.
        """
        channel = self._channels.get(run_id)
        if channel is not None and not channel.closed:
            channel.snapshot_source = snapshot
            if sink is not None:
                channel.attach(sink)
            return channel
        self._channels.pop(run_id, None)
        if len(self._channels) >= self._max_channels:
            for stale in [rid for rid, c in self._channels.items() if c.closed]:
                del self._channels[stale]
        if len(self._channels) >= self._max_channels:
            raise CapacityExceeded("open event channels", self._max_channels)
        channel = RunChannel(
            run_id,
            snapshot,
            sink=sink,
            replay_limit=self._replay_limit,
            queue_limit=self._queue_limit,
            max_subscribers=self._max_subscribers,
        )
        self._channels[run_id] = channel
        return channel

    def get(self, run_id: UUID) -> RunChannel | None:
        """The Run's channel while it is registered (open or closing), else None."""
        return self._channels.get(run_id)

    def discard(self, run_id: UUID, channel: RunChannel | None = None) -> None:
        """Forget the Run's channel; with `channel`, only if it is still that one."""
        current = self._channels.get(run_id)
        if current is not None and (channel is None or current is channel):
            del self._channels[run_id]

    async def close(self, run_id: UUID, grace: float = CLOSE_GRACE_S) -> None:
        """Close the Run's channel (drain or grace, see RunChannel.close) and discard it."""
        channel = self._channels.get(run_id)
        if channel is None:
            return
        try:
            await channel.close(grace)
        finally:
            self.discard(run_id, channel)

    def __len__(self) -> int:
        return len(self._channels)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._channels
