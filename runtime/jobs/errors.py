"""Typed refusals of the leased worker (seed 004_85033eb8fc772f12.txt).

Each one is raised before anything is overwritten: a refused claim claims
nothing, a refused stage leaves the job and its interpretations as they were
(only the returned usage is appended to the attempt log, as the seed's
"Alpha.2 accounting" asks).
"""

from __future__ import annotations

from uuid import UUID

from runtime.errors import RuntimeEngineError


class JobError(RuntimeEngineError):
    """Base of the leased worker's refusals."""


class UnknownJob(JobError):
    def __init__(self, job_id: UUID) -> None:
        super().__init__(f"no leased job {job_id}")
        self.job_id = job_id


class WorkspaceNotAuthorised(JobError):
    """A worker asked to claim in a workspace its scope does not grant."""

    def __init__(self, workspace: str, scopes: tuple[str, ...]) -> None:
        granted = ", ".join(scopes) or "none"
        super().__init__(f"workspace {workspace!r} is not authorised (granted: {granted})")
        self.workspace = workspace
        self.scopes = scopes


class JobConflict(JobError):
    """A receipt reused a job or evidence id for different content."""

    def __init__(self, job_id: UUID, reason: str) -> None:
        super().__init__(f"leased job {job_id}: {reason}")
        self.job_id = job_id
        self.reason = reason


class FenceError(JobError):
    """The caller no longer holds the job's current lease; nothing was overwritten."""

    def __init__(self, job_id: UUID, fence: int, reason: str) -> None:
        super().__init__(f"leased job {job_id} fence {fence}: {reason}")
        self.job_id = job_id
        self.fence = fence


class StaleFence(FenceError):
    def __init__(self, job_id: UUID, fence: int, current: int) -> None:
        super().__init__(job_id, fence, f"stale, the job is at fence {current}")
        self.current = current


class NotLeaseOwner(FenceError):
    def __init__(self, job_id: UUID, fence: int, owner: str, holder: str | None) -> None:
        super().__init__(job_id, fence, f"{owner!r} does not hold the lease (held by {holder!r})")
        self.owner = owner
        self.holder = holder


class LeaseExpired(FenceError):
    def __init__(self, job_id: UUID, fence: int) -> None:
        super().__init__(job_id, fence, "the lease has expired")


class AttemptClosed(FenceError):
    """The attempt of this fence already ended with a different outcome."""

    def __init__(self, job_id: UUID, fence: int) -> None:
        super().__init__(job_id, fence, "this attempt is already closed")


class ModelVersionMismatch(FenceError):
    def __init__(self, job_id: UUID, fence: int, expected: str, got: str) -> None:
        super().__init__(job_id, fence, f"result from model {got!r}, the job requires {expected!r}")
        self.expected = expected
        self.got = got


class CallBudgetExhausted(JobError):
    def __init__(self, job_id: UUID, limit: int) -> None:
        super().__init__(f"leased job {job_id} has reserved all {limit} model calls")
        self.job_id = job_id
        self.limit = limit


class NotReprocessable(JobError):
    def __init__(self, job_id: UUID, state: str) -> None:
        super().__init__(
            f"leased job {job_id} is {state}: only staged, waiting or ended jobs are reprocessed"
        )
        self.job_id = job_id
        self.state = state
