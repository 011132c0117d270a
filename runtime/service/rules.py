"""The transitions of ServiceJobAttempt@1 as pure functions.

Both stores lock the attempt, call one `decide_*` here and write the attempt
it returns (when it differs from the stored one). Each function raises a
typed refusal instead of writing when the transition is not allowed, so the
memory and PostgreSQL stores answer identically (seed
000_81a5c720b14d934a.txt, "Service job attempts").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from runtime.service.errors import (
    IllegalTransition,
    ProviderIdentityConflict,
    ResubmitRefused,
    ServicePayloadConflict,
    ServiceResultConflict,
)
from runtime.service.models import (
    RESUBMIT_PROOFS,
    Evidence,
    EvidenceKind,
    ServiceJobAttempt,
    ServiceOutcome,
    ServiceState,
)

S = ServiceState
SENT = (S.SUBMITTING, S.ACCEPTED, S.RUNNING, S.INDETERMINATE)
"""States in which a transmission may have had an effect."""
NO_EFFECT_PROOFS = (EvidenceKind.SUBMIT_REJECTED, EvidenceKind.NO_EFFECT)
"""Evidence that one transmission had no effect: it settles only that transmission."""


def _put(
    attempt: ServiceJobAttempt, now: datetime, evidence: Evidence | None = None, **changes: Any
) -> ServiceJobAttempt:
    if evidence is not None:
        changes["evidence"] = (*attempt.evidence, evidence)
    changes.update(version=attempt.version + 1, updated_at=now)
    # The changes are typed values from the decisions above (already validated
    # records, enums, counters), and request, binding and envelope never change
    # here; so a shallow copy plus the model's own consistency check is what
    # re-validating a full dump proved, without dumping the whole evidence
    # history on every write (records are frozen: sharing them is safe).
    return attempt.model_copy(update=changes).consistent()


def decide_prepare(
    attempt: ServiceJobAttempt,
    by_id: ServiceJobAttempt | None,
    by_key: ServiceJobAttempt | None,
) -> ServiceJobAttempt | None:
    """None: insert `attempt`. Otherwise the stored attempt it repeats.

    The same key with the same sealed bytes, target, owner and generation
    returns the stored attempt (adopt it, whatever its id); anything else
    for that key, or the id reused for another key, is refused.
    """
    if attempt.state is not S.PREPARED or attempt.transmissions or attempt.evidence:
        raise IllegalTransition(attempt.id, attempt.state.value, "be prepared: not fresh")
    if by_id is not None and by_id.idempotency_key != attempt.idempotency_key:
        raise ServicePayloadConflict(
            attempt.idempotency_key, by_id.id, "the attempt id is bound to another key"
        )
    stored = by_key if by_key is not None else by_id
    if stored is None:
        return None
    if stored.request_digest != attempt.request_digest:
        raise ServicePayloadConflict(
            attempt.idempotency_key, stored.id, "the request, binding or target changed"
        )
    if (stored.owner, stored.generation) != (attempt.owner, attempt.generation):
        raise ServicePayloadConflict(
            attempt.idempotency_key, stored.id, "another owner or generation holds it"
        )
    return stored


def decide_begin_submit(attempt: ServiceJobAttempt, now: datetime) -> ServiceJobAttempt:
    """The CAS PREPARED -> SUBMITTING that precedes the first driver call."""
    if attempt.state is not S.PREPARED:
        raise IllegalTransition(attempt.id, attempt.state.value, "begin the first submit")
    if attempt.cancel_requested_at is not None:
        raise IllegalTransition(attempt.id, "cancel-requested", "begin the first submit")
    return _put(attempt, now, state=S.SUBMITTING, transmissions=1)


def decide_begin_resubmit(
    attempt: ServiceJobAttempt, proof: Evidence, now: datetime
) -> ServiceJobAttempt:
    """Another transmission of the same generation, only on proof."""
    if attempt.state not in (S.SUBMITTING, S.INDETERMINATE):
        raise IllegalTransition(attempt.id, attempt.state.value, "re-submit")
    if attempt.cancel_requested_at is not None:
        raise ResubmitRefused(attempt.id, "cancellation was requested")
    if proof.kind not in RESUBMIT_PROOFS:
        raise ResubmitRefused(attempt.id, f"{proof.kind.value} proves neither no effect nor replay")
    if proof.transmission != attempt.transmissions:
        raise ResubmitRefused(
            attempt.id,
            f"the proof observed transmission {proof.transmission}, the attempt has made "
            f"{attempt.transmissions}",
        )
    if proof.kind is EvidenceKind.NO_EFFECT and attempt.provider_job_id is not None:
        raise ResubmitRefused(attempt.id, "a provider job was acknowledged: an effect exists")
    return _put(attempt, now, proof, state=S.SUBMITTING, transmissions=attempt.transmissions + 1)


def _same_provider(attempt: ServiceJobAttempt, provider_job_id: str) -> None:
    known = attempt.provider_job_id
    if known is not None and known != provider_job_id:
        raise ProviderIdentityConflict(attempt.id, known, provider_job_id)


def decide_accept(
    attempt: ServiceJobAttempt, provider_job_id: str, evidence: Evidence, now: datetime
) -> ServiceJobAttempt:
    """SUBMITTING | INDETERMINATE -> ACCEPTED, persisting the provider identity."""
    _same_provider(attempt, provider_job_id)
    if attempt.state in (S.ACCEPTED, S.RUNNING) or attempt.state.terminal:
        return attempt  # already known: a repeat, or a stale acknowledgement
    if attempt.state not in (S.SUBMITTING, S.INDETERMINATE):
        raise IllegalTransition(attempt.id, attempt.state.value, "accept a provider job")
    return _put(attempt, now, evidence, state=S.ACCEPTED, provider_job_id=provider_job_id)


def decide_running(
    attempt: ServiceJobAttempt, progress_cursor: str | None, now: datetime
) -> ServiceJobAttempt:
    if attempt.state.terminal:
        return attempt  # terminal truth is kept
    if attempt.state not in (S.ACCEPTED, S.RUNNING, S.INDETERMINATE) or not attempt.provider_job_id:
        raise IllegalTransition(attempt.id, attempt.state.value, "run without a provider job")
    if attempt.state is S.RUNNING and attempt.progress_cursor == progress_cursor:
        return attempt
    return _put(attempt, now, state=S.RUNNING, progress_cursor=progress_cursor)


def decide_indeterminate(
    attempt: ServiceJobAttempt, evidence: Evidence, now: datetime
) -> ServiceJobAttempt:
    if attempt.state.terminal:
        return attempt
    if attempt.state not in SENT:
        raise IllegalTransition(attempt.id, attempt.state.value, "be indeterminate: never sent")
    return _put(attempt, now, evidence, state=S.INDETERMINATE)


def _settle_allowed(
    attempt: ServiceJobAttempt, outcome: ServiceOutcome, evidence: Evidence
) -> bool:
    state, kind = attempt.state, evidence.kind
    if kind in NO_EFFECT_PROOFS and evidence.transmission != attempt.transmissions:
        # It proves nothing about a later transmission, which may have had an effect
        # (a rejection of transmission 1 arriving after another process re-submitted).
        return False
    if outcome.state is S.CANCELLED:
        if state is S.PREPARED:
            return kind is EvidenceKind.NEVER_SUBMITTED
        return kind in (EvidenceKind.CANCEL_CONTAINED, EvidenceKind.NO_EFFECT)
    if state is S.PREPARED:
        return False
    if outcome.state is S.FAILED and kind in (EvidenceKind.SUBMIT_REJECTED, EvidenceKind.NO_EFFECT):
        return state in (S.SUBMITTING, S.INDETERMINATE) and attempt.provider_job_id is None
    # SUCCEEDED, or a FAILED the provider reported: only for a job the provider acknowledged.
    return (
        state in (S.ACCEPTED, S.RUNNING, S.INDETERMINATE)
        and attempt.provider_job_id is not None
        and kind is EvidenceKind.LOOKUP_FOUND
    )


def decide_settle(
    attempt: ServiceJobAttempt, outcome: ServiceOutcome, evidence: Evidence, now: datetime
) -> ServiceJobAttempt:
    if attempt.state.terminal:
        if (attempt.state, attempt.result, attempt.diagnostic, attempt.usage) == (
            outcome.state,
            outcome.result,
            outcome.diagnostic,
            outcome.usage,
        ):
            return attempt
        raise ServiceResultConflict(attempt.id, attempt.state.value)
    if not _settle_allowed(attempt, outcome, evidence):
        raise IllegalTransition(
            attempt.id,
            attempt.state.value,
            f"settle {outcome.state.value} on {evidence.kind.value} evidence",
        )
    return _put(
        attempt,
        now,
        evidence,
        state=outcome.state,
        result=outcome.result,
        diagnostic=outcome.diagnostic,
        usage=outcome.usage,
    )


def decide_request_cancel(attempt: ServiceJobAttempt, now: datetime) -> ServiceJobAttempt:
    if attempt.state.terminal or attempt.cancel_requested_at is not None:
        return attempt
    evidence = Evidence(
        kind=EvidenceKind.CANCEL_REQUESTED, at=now, transmission=attempt.transmissions
    )
    return _put(attempt, now, evidence, cancel_requested_at=now)


def decide_add_evidence(
    attempt: ServiceJobAttempt, evidence: Evidence, now: datetime
) -> ServiceJobAttempt:
    return _put(attempt, now, evidence)
