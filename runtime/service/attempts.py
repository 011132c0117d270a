"""Submit, reconcile and cancel ServiceJobAttempt@1 records.

Seed 000_81a5c720b14d934a.txt, "Service job attempts (Designed)":

- `prepare` persists the attempt before any submit.
- `submit` makes the CAS to SUBMITTING and only then calls the driver; the
  provider job identity is persisted with ACCEPTED. A deadline, a lost or
  malformed acknowledgement, or any other failure after the call began
  settles INDETERMINATE, never FAILED; only a driver-proved rejection fails.
  If this process dies in between, the attempt stays SUBMITTING.
- `reconcile` looks the job up by provider identity and idempotency
  identity. A found job is adopted (a payload that differs is refused with
  ServicePayloadConflict and nothing is written). A missing job re-submits
  only on proof: a lookup that proves absence, or same-key replay; without
  proof the attempt stays INDETERMINATE and no new effect is authorised.
- `cancel` records intent, asks the exact attempt owner, and continues
  reconciliation; CANCELLED means containment was proved.

Each physical transmission asks the `egress` hook first (a fresh decision).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import anyio

from runtime import faults
from runtime.faults import NoFaults
from runtime.seams import Clock, FaultPoints
from runtime.service.driver import (
    KeyReuseRejected,
    ProviderReport,
    ProviderStatus,
    ServiceDriver,
    ServiceSubmission,
    SubmitRejected,
)
from runtime.service.errors import (
    EgressDenied,
    ResubmitRefused,
    ServicePayloadConflict,
    UnknownAttempt,
)
from runtime.service.models import (
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

DEADLINE_S = 30.0

Egress = Callable[[ServiceJobAttempt], Awaitable[bool]]


async def _allow(attempt: ServiceJobAttempt) -> bool:
    return True


@dataclass(frozen=True)
class ServiceContext:
    store: ServiceAttemptStore
    driver: ServiceDriver
    clock: Clock
    deadline_s: float = DEADLINE_S
    """Bound of every driver call (submit, lookup, cancel)."""
    resubmit: bool = True
    """The domain retry policy admits another transmission of the same generation."""
    egress: Egress = _allow
    """Asked before each physical transmission; False refuses it (EgressDenied)."""
    faults: FaultPoints = field(default_factory=NoFaults)
    """Named crash windows (runtime.faults); production: the no-op NoFaults."""


def new_attempt(
    attempt_id: UUID,
    *,
    owner: AttemptOwner,
    idempotency_key: str,
    generation: int,
    request: dict[str, Any],
    binding: CapabilityBinding | ToolBinding,
    now: datetime,
    envelope: ServiceEnvelope | None = None,
) -> ServiceJobAttempt:
    return ServiceJobAttempt(
        id=attempt_id,
        owner=owner,
        idempotency_key=idempotency_key,
        generation=generation,
        request=request,
        binding=binding,
        envelope=envelope or ServiceEnvelope(),
        created_at=now,
        updated_at=now,
    )


ACKNOWLEDGED_JOB_GONE = "the provider no longer knows an acknowledged job"
"""Why a lookup's absence left an attempt with a provider job identity INDETERMINATE."""
ABSENCE_NOT_PROOF = "absence is not proof of no effect for this driver"
"""Why it left one without: the driver neither proves absence nor replays by key."""


def _evidence(
    ctx: ServiceContext,
    attempt: ServiceJobAttempt,
    kind: EvidenceKind,
    detail: str = "",
    provider_job_id: str | None = None,
) -> Evidence:
    return Evidence(
        kind=kind,
        at=ctx.clock.now(),
        transmission=attempt.transmissions,
        provider_job_id=provider_job_id,
        detail=detail,
    )


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def prepare(ctx: ServiceContext, attempt: ServiceJobAttempt) -> ServiceJobAttempt:
    return await ctx.store.prepare(attempt)


async def _get(ctx: ServiceContext, attempt_id: UUID) -> ServiceJobAttempt:
    attempt = await ctx.store.get(attempt_id)
    if attempt is None:
        raise UnknownAttempt(attempt_id)
    return attempt


async def submit(ctx: ServiceContext, attempt_id: UUID) -> ServiceJobAttempt:
    """The first transmission of a PREPARED attempt."""
    attempt = await _get(ctx, attempt_id)
    if not await ctx.egress(attempt):
        raise EgressDenied(attempt_id)
    attempt = await ctx.store.begin_submit(attempt_id, ctx.clock.now())
    return await _transmit(ctx, attempt)


async def _transmit(ctx: ServiceContext, attempt: ServiceJobAttempt) -> ServiceJobAttempt:
    """Call the driver for an attempt already SUBMITTING, and record what came back."""
    store, now = ctx.store, ctx.clock.now
    submission = ServiceSubmission(
        attempt_id=attempt.id,
        idempotency_key=attempt.idempotency_key,
        request_digest=attempt.request_digest,
        request=attempt.request,
        binding=attempt.binding,
        destination=attempt.envelope.destination,
        transmission=attempt.transmissions,
    )
    try:
        with anyio.fail_after(ctx.deadline_s):
            ack = await ctx.driver.submit(submission)
    except KeyReuseRejected as exc:
        raise ServicePayloadConflict(
            attempt.idempotency_key, attempt.id, f"the provider refused the key: {exc}"
        ) from None
    except SubmitRejected as exc:
        evidence = _evidence(ctx, attempt, EvidenceKind.SUBMIT_REJECTED, _why(exc))
        outcome = ServiceOutcome(state=ServiceState.FAILED, diagnostic={"rejected": str(exc)})
        return await store.settle(attempt.id, outcome, evidence, now())
    except TimeoutError:
        evidence = _evidence(
            ctx, attempt, EvidenceKind.SUBMIT_TIMEOUT, f"no answer within {ctx.deadline_s:g} s"
        )
        return await store.mark_indeterminate(attempt.id, evidence, now())
    except Exception as exc:  # after the call began: the effect may have escaped
        evidence = _evidence(ctx, attempt, EvidenceKind.SUBMIT_ERROR, _why(exc))
        return await store.mark_indeterminate(attempt.id, evidence, now())
    # The provider acknowledged; the attempt is SUBMITTING until the ack is persisted.
    await ctx.faults.point(
        faults.SERVICE_SUBMITTED_BEFORE_ACK,
        attempt_id=attempt.id,
        provider_job_id=ack.provider_job_id,
        transmission=attempt.transmissions,
    )
    if not ack.provider_job_id:
        evidence = _evidence(ctx, attempt, EvidenceKind.MALFORMED_ACK, repr(ack))
        return await store.mark_indeterminate(attempt.id, evidence, now())
    evidence = _evidence(ctx, attempt, EvidenceKind.ACCEPTED, provider_job_id=ack.provider_job_id)
    return await store.accept(attempt.id, ack.provider_job_id, evidence, now())


async def reconcile(ctx: ServiceContext, attempt_id: UUID) -> ServiceJobAttempt:
    """Bring the attempt in line with what the provider can prove."""
    store, now = ctx.store, ctx.clock.now
    attempt = await _get(ctx, attempt_id)
    if attempt.state.terminal or attempt.state is ServiceState.PREPARED:
        return attempt
    try:
        with anyio.fail_after(ctx.deadline_s):
            report = await ctx.driver.lookup(
                idempotency_key=attempt.idempotency_key, provider_job_id=attempt.provider_job_id
            )
    except Exception as exc:
        evidence = _evidence(ctx, attempt, EvidenceKind.LOOKUP_FAILED, _why(exc))
        return await store.add_evidence(attempt.id, evidence, now())
    if report is None:
        return await _absent(ctx, attempt)
    return await _adopt(ctx, attempt, report)


async def _absent(ctx: ServiceContext, attempt: ServiceJobAttempt) -> ServiceJobAttempt:
    store, now = ctx.store, ctx.clock.now
    driver = ctx.driver
    if attempt.provider_job_id is not None or not (
        driver.lookup_proves_absence or driver.replays_same_key
    ):
        detail = ACKNOWLEDGED_JOB_GONE if attempt.provider_job_id is not None else (
            ABSENCE_NOT_PROOF
        )
        evidence = _evidence(ctx, attempt, EvidenceKind.LOOKUP_ABSENT, detail)
        return await store.mark_indeterminate(attempt.id, evidence, now())
    if driver.lookup_proves_absence:
        proof = _evidence(ctx, attempt, EvidenceKind.NO_EFFECT, "lookup proves no job exists")
    else:
        proof = _evidence(ctx, attempt, EvidenceKind.SAME_KEY_REPLAY, "driver replays same key")
    if attempt.cancel_requested_at is not None and proof.kind is EvidenceKind.NO_EFFECT:
        outcome = ServiceOutcome(state=ServiceState.CANCELLED)
        return await store.settle(attempt.id, outcome, proof, now())
    if not ctx.resubmit or attempt.cancel_requested_at is not None:
        return await store.mark_indeterminate(attempt.id, proof, now())
    if not await ctx.egress(attempt):
        raise EgressDenied(attempt.id)
    try:
        attempt = await store.begin_resubmit(attempt.id, proof, now())
    except ResubmitRefused:
        return await _get(ctx, attempt.id)
    return await _transmit(ctx, attempt)


async def _adopt(
    ctx: ServiceContext, attempt: ServiceJobAttempt, report: ProviderReport
) -> ServiceJobAttempt:
    store, now = ctx.store, ctx.clock.now
    if (report.idempotency_key, report.request_digest) != (
        attempt.idempotency_key,
        attempt.request_digest,
    ):
        raise ServicePayloadConflict(
            attempt.idempotency_key,
            attempt.id,
            f"provider job {report.provider_job_id!r} holds a different payload",
        )
    found = _evidence(
        ctx,
        attempt,
        EvidenceKind.LOOKUP_FOUND,
        report.status.value,
        provider_job_id=report.provider_job_id,
    )
    attempt = await store.accept(attempt.id, report.provider_job_id, found, now())
    if report.status is ProviderStatus.ACCEPTED:
        return attempt
    if report.status is ProviderStatus.RUNNING:
        return await store.mark_running(attempt.id, report.progress_cursor, now())
    if report.status is ProviderStatus.CANCELLED:
        contained = found.model_copy(update={"kind": EvidenceKind.CANCEL_CONTAINED})
        outcome = ServiceOutcome(state=ServiceState.CANCELLED, usage=report.usage)
        return await store.settle(attempt.id, outcome, contained, now())
    state = (
        ServiceState.SUCCEEDED if report.status is ProviderStatus.SUCCEEDED else ServiceState.FAILED
    )
    outcome = ServiceOutcome(
        state=state, result=report.result, diagnostic=report.diagnostic, usage=report.usage
    )
    return await store.settle(attempt.id, outcome, found, now())


async def cancel(ctx: ServiceContext, attempt_id: UUID) -> ServiceJobAttempt:
    """Record intent, ask the exact owner for containment, keep reconciling."""
    store, now = ctx.store, ctx.clock.now
    attempt = await store.request_cancel(attempt_id, now())
    if attempt.state.terminal:
        return attempt
    if attempt.state is ServiceState.PREPARED:
        never = _evidence(ctx, attempt, EvidenceKind.NEVER_SUBMITTED)
        return await store.settle(
            attempt_id, ServiceOutcome(state=ServiceState.CANCELLED), never, now()
        )
    try:
        with anyio.fail_after(ctx.deadline_s):
            contained = await ctx.driver.cancel(
                idempotency_key=attempt.idempotency_key, provider_job_id=attempt.provider_job_id
            )
    except Exception as exc:  # a lost cancellation acknowledgement proves nothing
        evidence = _evidence(ctx, attempt, EvidenceKind.CANCEL_UNACKNOWLEDGED, _why(exc))
        await store.add_evidence(attempt_id, evidence, now())
        return await reconcile(ctx, attempt_id)
    if not contained:
        evidence = _evidence(ctx, attempt, EvidenceKind.CANCEL_UNACKNOWLEDGED, "not contained")
        await store.add_evidence(attempt_id, evidence, now())
        return await reconcile(ctx, attempt_id)
    after = await reconcile(ctx, attempt_id)  # the job may have finished before containment
    if after.state.terminal:
        return after
    proof = _evidence(ctx, after, EvidenceKind.CANCEL_CONTAINED, "the owner proved containment")
    return await store.settle(
        attempt_id, ServiceOutcome(state=ServiceState.CANCELLED), proof, now()
    )


async def reconcile_open(ctx: ServiceContext, page: int = 100) -> list[ServiceJobAttempt]:
    """One pass over every nonterminal attempt (for startup and relays).

    A refusal on one attempt (for example a payload conflict the provider
    reports) is left on that attempt and does not stop the pass.
    """
    seen: list[ServiceJobAttempt] = []
    after: tuple[datetime, UUID] | None = None
    while True:
        batch = await ctx.store.open_attempts(after, page)
        for attempt in batch:
            try:
                seen.append(await reconcile(ctx, attempt.id))
            except ServicePayloadConflict:
                seen.append(attempt)
        if len(batch) < page:
            return seen
        after = (batch[-1].created_at, batch[-1].id)
