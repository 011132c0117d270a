"""ServiceJobAttempt@1 (seed 000_81a5c720b14d934a.txt, "Service job attempts").

Models and transitions of the common envelope, the `ServiceAttemptStore`
and `ServiceDriver` seams, and `prepare` / `submit` / `reconcile` /
`cancel` over them. Parking a Run AWAITING_SERVICE and resuming it through
the owner CAS belongs to the run engine's Ledger and is not wired here.
"""

from runtime.service.attempts import (
    ServiceContext,
    cancel,
    new_attempt,
    prepare,
    reconcile,
    reconcile_open,
    submit,
)
from runtime.service.driver import (
    KeyReuseRejected,
    ProviderReport,
    ProviderStatus,
    ServiceDriver,
    ServiceSubmission,
    SubmitAck,
    SubmitRejected,
)
from runtime.service.errors import (
    EgressDenied,
    IllegalTransition,
    ProviderIdentityConflict,
    ResubmitRefused,
    ServiceError,
    ServicePayloadConflict,
    ServiceResultConflict,
    UnknownAttempt,
)
from runtime.service.models import (
    ENVELOPE,
    AttemptOwner,
    CapabilityBinding,
    Evidence,
    EvidenceKind,
    ServiceEnvelope,
    ServiceJobAttempt,
    ServiceOutcome,
    ServiceState,
    ToolBinding,
)
from runtime.service.store import ServiceAttemptStore

__all__ = [
    "ENVELOPE",
    "AttemptOwner",
    "CapabilityBinding",
    "EgressDenied",
    "Evidence",
    "EvidenceKind",
    "IllegalTransition",
    "KeyReuseRejected",
    "ProviderIdentityConflict",
    "ProviderReport",
    "ProviderStatus",
    "ResubmitRefused",
    "ServiceAttemptStore",
    "ServiceContext",
    "ServiceDriver",
    "ServiceEnvelope",
    "ServiceError",
    "ServiceJobAttempt",
    "ServiceOutcome",
    "ServicePayloadConflict",
    "ServiceResultConflict",
    "ServiceState",
    "ServiceSubmission",
    "SubmitAck",
    "SubmitRejected",
    "ToolBinding",
    "UnknownAttempt",
    "cancel",
    "new_attempt",
    "prepare",
    "reconcile",
    "reconcile_open",
    "submit",
]
