"""The leased worker of seed 004_85033eb8fc772f12.txt.

Evidence and its job are received in one transaction; `run_once` claims at
most one eligible job of the authorised workspace under a fenced 90 s
lease, reserves each model call before networking, calls the model outside
any transaction, and stages only while it still holds the lease. Storage is
the `JobStore` seam (memory and PostgreSQL adapters), the model is the
`ModelClient` seam.
"""

from runtime.jobs.errors import (
    AttemptClosed,
    CallBudgetExhausted,
    FenceError,
    JobConflict,
    JobError,
    LeaseExpired,
    ModelVersionMismatch,
    NotLeaseOwner,
    NotReprocessable,
    StaleFence,
    UnknownJob,
    WorkspaceNotAuthorised,
)
from runtime.jobs.model import (
    ContextTooLarge,
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    RetryableModelError,
)
from runtime.jobs.models import (
    DEFAULT_POLICY,
    AttemptEvent,
    AttemptFailure,
    EventKind,
    EvidenceRecord,
    Interpretation,
    JobPolicy,
    JobState,
    LeasedJob,
    Refusal,
    StagedResult,
    Usage,
    new_job,
)
from runtime.jobs.store import JobStore
from runtime.jobs.worker import WorkerContext, run_once

__all__ = [
    "DEFAULT_POLICY",
    "AttemptClosed",
    "AttemptEvent",
    "AttemptFailure",
    "CallBudgetExhausted",
    "ContextTooLarge",
    "EventKind",
    "EvidenceRecord",
    "FenceError",
    "Interpretation",
    "JobConflict",
    "JobError",
    "JobPolicy",
    "JobState",
    "JobStore",
    "LeaseExpired",
    "LeasedJob",
    "ModelClient",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "ModelVersionMismatch",
    "NotLeaseOwner",
    "NotReprocessable",
    "Refusal",
    "RetryableModelError",
    "StagedResult",
    "StaleFence",
    "UnknownJob",
    "Usage",
    "WorkerContext",
    "WorkspaceNotAuthorised",
    "new_job",
    "run_once",
]
