"""Typed errors of the run engine. Each names what was wrong and why."""

from __future__ import annotations

from uuid import UUID


class RuntimeEngineError(Exception):
    """Base of every error the engine raises on purpose."""


class InvalidIntent(RuntimeEngineError):
    """An Intent field failed validation; nothing was written."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class UnknownPattern(InvalidIntent):
    def __init__(self, name: str, version: int | None = None) -> None:
        what = name if version is None else f"{name}@{version}"
        super().__init__("pattern", f"no registered Pattern {what!r}")


class IdempotencyConflict(RuntimeEngineError):
    """A scoped idempotency key was reused for different work: fails closed."""

    def __init__(self, key: str, run_id: UUID) -> None:
        super().__init__(
            f"idempotency_key: {key!r} already admitted Run {run_id} with different content"
        )
        self.field = "idempotency_key"
        self.key = key
        self.run_id = run_id


class SessionBusy(RuntimeEngineError):
    """A Bridge session already has a nonterminal Run."""

    def __init__(self, session: str, run_id: UUID) -> None:
        super().__init__(f"session: {session!r} already has nonterminal Run {run_id}")
        self.field = "session"
        self.session = session
        self.run_id = run_id


class HeldWithoutOwner(RuntimeEngineError):
    """A replay found an unresolved HELD admission and no retention hook to resolve it."""

    def __init__(self, run_id: UUID, seq: int) -> None:
        super().__init__(f"Run {run_id} delivery {seq} is HELD and no retention owner was given")
        self.run_id = run_id
        self.seq = seq


class RetentionFailed(RuntimeEngineError):
    """The caller-retention hook failed; the exact held generation was settled FAILED."""


class NotFound(RuntimeEngineError):
    def __init__(self, what: str, ident: object) -> None:
        super().__init__(f"{what} {ident} not found")
        self.what = what
        self.ident = ident


class ClaimLost(RuntimeEngineError):
    """A hop no longer holds its Run's claim (cancelled, settled or moved on):
    it must not act any more, and its settlement is fenced."""

    def __init__(self, run_id: UUID, seq: int, status: str) -> None:
        super().__init__(f"Run {run_id} hop {seq} no longer holds its claim (Run is {status})")
        self.run_id = run_id
        self.seq = seq
        self.status = status


class LedgerUnavailable(RuntimeEngineError):
    """A transient ledger error: the transaction may or may not have committed."""


class BrokerUnavailable(RuntimeEngineError):
    """The broker refused or failed an operation."""


class StopUnproven(RuntimeEngineError):
    """A worker or relay was asked to stop and its end could not be proved.

    Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"
    (shutdown paragraph): while some task may still run, the services it
    shares (ledger pool, job and service store pools, queue pools) stay
    open; whoever owns them checks `stop_unproven` before closing any.
    """


def unproven_stops(exc: BaseException | None) -> list[StopUnproven]:
    """Every `StopUnproven` that `exc` is or holds, at any depth of exception groups."""
    if isinstance(exc, StopUnproven):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in unproven_stops(inner)]
    return []


def stop_unproven(exc: BaseException | None) -> bool:
    """Whether `exc` is, or a group holding, a `StopUnproven` at any depth."""
    return bool(unproven_stops(exc))


class ProcessCrashed(BaseException):
    """Raised inside a dead process incarnation (simulator only).

    A BaseException so ordinary `except Exception` recovery code cannot
    swallow it and keep writing after death.
    """
