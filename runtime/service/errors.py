"""Typed refusals of ServiceJobAttempt@1 (seed 000_81a5c720b14d934a.txt,
"Service job attempts"). Each is raised before anything is written."""

from __future__ import annotations

from uuid import UUID

from runtime.errors import RuntimeEngineError


class ServiceError(RuntimeEngineError):
    """Base of the service attempt refusals."""


class UnknownAttempt(ServiceError):
    def __init__(self, attempt_id: UUID) -> None:
        super().__init__(f"no service attempt {attempt_id}")
        self.attempt_id = attempt_id


class ServicePayloadConflict(ServiceError):
    """The idempotency identity is bound to different sealed bytes or target."""

    def __init__(self, key: str, attempt_id: UUID | None, reason: str) -> None:
        owner = f" (attempt {attempt_id})" if attempt_id else ""
        super().__init__(f"idempotency key {key!r}{owner}: {reason}")
        self.key = key
        self.attempt_id = attempt_id
        self.reason = reason


class ServiceResultConflict(ServiceError):
    """A terminal attempt was asked to settle differently: terminal truth is kept."""

    def __init__(self, attempt_id: UUID, state: str) -> None:
        super().__init__(f"service attempt {attempt_id} is already {state} with another result")
        self.attempt_id = attempt_id
        self.state = state


class ProviderIdentityConflict(ServiceError):
    def __init__(self, attempt_id: UUID, known: str, reported: str) -> None:
        super().__init__(
            f"service attempt {attempt_id} is provider job {known!r}, not {reported!r}"
        )
        self.attempt_id = attempt_id
        self.known = known
        self.reported = reported


class IllegalTransition(ServiceError):
    def __init__(self, attempt_id: UUID, state: str, action: str) -> None:
        super().__init__(f"service attempt {attempt_id} is {state}: cannot {action}")
        self.attempt_id = attempt_id
        self.state = state
        self.action = action


class ResubmitRefused(ServiceError):
    """No proof of no effect and no same-key replay: a new transmission is not authorised."""

    def __init__(self, attempt_id: UUID, reason: str) -> None:
        super().__init__(f"service attempt {attempt_id} may not be re-submitted: {reason}")
        self.attempt_id = attempt_id
        self.reason = reason


class EgressDenied(ServiceError):
    def __init__(self, attempt_id: UUID) -> None:
        super().__init__(f"service attempt {attempt_id}: the egress decision refused transmission")
        self.attempt_id = attempt_id
