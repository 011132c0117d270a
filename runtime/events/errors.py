"""Typed errors of the event bus and the Step writer. Each names what was wrong."""

from __future__ import annotations

from uuid import UUID

from runtime.errors import RuntimeEngineError


class EventError(RuntimeEngineError):
    """Base of every error raised on purpose by `runtime.events`."""


class InvalidCursor(EventError):
    """A subscriber cursor that no channel position can answer."""

    def __init__(self, run_id: UUID, cursor: int, current: int, reason: str) -> None:
        super().__init__(f"cursor {cursor} of Run {run_id}: {reason} (current cursor {current})")
        self.run_id = run_id
        self.cursor = cursor
        self.current = current


class CursorFromFuture(InvalidCursor):
    """The subscriber asked to resume after an event the channel has not published yet."""

    def __init__(self, run_id: UUID, cursor: int, current: int) -> None:
        super().__init__(run_id, cursor, current, "is ahead of the channel")


class ReservedKind(EventError):
    """A publisher tried to publish a kind only the channel itself may produce."""

    def __init__(self, run_id: UUID, kind: str) -> None:
        super().__init__(f"Run {run_id}: event kind {kind!r} is reserved for the channel")
        self.run_id = run_id
        self.kind = kind


class EventAfterTerminal(EventError):
    """The channel already accepted its one terminal event; nothing may follow it."""

    def __init__(self, run_id: UUID, kind: str, terminal_kind: str, terminal_cursor: int) -> None:
        super().__init__(
            f"Run {run_id}: event {kind!r} rejected, the channel already accepted its terminal "
            f"event {terminal_kind!r} at cursor {terminal_cursor}"
        )
        self.run_id = run_id
        self.kind = kind
        self.terminal_kind = terminal_kind
        self.terminal_cursor = terminal_cursor


class ChannelClosed(EventError):
    """The Run's channel is closed: no publishing, no new subscribers."""

    def __init__(self, run_id: UUID, action: str) -> None:
        super().__init__(f"Run {run_id}: cannot {action}, its event channel is closed")
        self.run_id = run_id
        self.action = action


class CapacityExceeded(EventError):
    """A bounded registry (channels of a bus, subscribers of a channel) is full."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what}: at most {limit} allowed")
        self.what = what
        self.limit = limit


class StepWriterClosed(EventError):
    """The Step writer is not running (never started, exited, or its task died)."""

    def __init__(self, run_id: UUID, action: str) -> None:
        super().__init__(f"Run {run_id}: cannot {action}, its Step writer is not running")
        self.run_id = run_id
        self.action = action


class StepWriteFailed(EventError):
    """A Step append failed; the failure is latched for its writer generation.

    Every waiter of that generation gets a `StepWriteFailed` carrying the same
    original `error` object. It reports lost evidence only: Run truth that was
    already committed stays committed.
    """

    def __init__(self, run_id: UUID, generation: int, kind: str, error: BaseException) -> None:
        super().__init__(
            f"Run {run_id}: Step {kind!r} was not persisted (writer generation {generation}): "
            f"{type(error).__name__}: {error}"
        )
        self.run_id = run_id
        self.generation = generation
        self.kind = kind
        self.error = error
