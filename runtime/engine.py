"""RunEngine.submit: the sole admission path.

Implements seed 000_81a5c720b14d934a.txt, "Admission and exact claim":
one transaction records the QUEUED Run and its delivery at sequence 0
(HELD while a caller-retention hook must still run, else PENDING); the hook
runs and the held generation is released; the hop is published under its
exact key with broker priority `100 - priority`; the acknowledgement marks
the delivery PUBLISHED. PostgreSQL and the broker are not one transaction:
a publish that fails leaves the Run QUEUED and its delivery recoverable by
the delivery relay.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar
from uuid import NAMESPACE_URL, UUID, uuid5

import anyio
from pydantic import ValidationError

from runtime import faults
from runtime.errors import (
    BrokerUnavailable,
    HeldWithoutOwner,
    IdempotencyConflict,
    InvalidIntent,
    RetentionFailed,
    SessionBusy,
)
from runtime.events.repair import write_or_owe
from runtime.models import (
    Admission,
    DeliveryState,
    Intent,
    ResumeMode,
    Run,
    RunDelivery,
    RunStatus,
)
from runtime.publish_fence import LateJob, fence_late_job
from runtime.registry import QueueRouter, WorkflowRegistry, check_priority
from runtime.retry import retrying
from runtime.seams import Deps
from runtime.sessions import AdmissionCoordinator

log = logging.getLogger(__name__)
T = TypeVar("T")

RUN_NAMESPACE = uuid5(NAMESPACE_URL, "urn:vessel:run")
HEARTBEAT_S = 120
"""SAQ heartbeat of every Run job: an untouched active job is swept after this."""

RetentionHook = Callable[[Run], Awaitable[None]]
"""Caller-owned, idempotent: retain admission context for this Run."""


def idempotent_run_id(intent: Intent) -> UUID | None:
    """Server-owned deterministic Run id for a scoped idempotency key."""
    if intent.idempotency_key is None:
        return None
    scope = f"{intent.source}\x00{intent.sigil}"
    return uuid5(RUN_NAMESPACE, f"{scope}\x00{intent.idempotency_key}")


def own_commit(admission: Admission, run: Run, delivery: RunDelivery) -> bool:
    """Whether an admission that found its id taken found this call's own records:
    its own commit, seen again by a retry after an ambiguous commit, so it carries
    on as the creator. The delivery is compared too: another Vessel racing the same
    key at the same instant writes an equal Run, but its delivery differs when one
    of the two holds the admission for a retention hook (HELD, held_by) and the
    other does not; the later one is then a replay, never a second creator."""
    return admission.run == run and admission.delivery == delivery


def validated_intent(intent: Intent) -> Intent:
    """Re-check an Intent at the admission edge; nothing is written for a bad one.

    An Intent built with `model_copy(update=...)` or `model_construct` skips
    pydantic validation, so submit cannot trust that a value it receives was
    ever validated. The first failing field is reported as InvalidIntent.
    """
    if intent.priority is not None:
        check_priority("priority", intent.priority)
    try:
        return Intent.model_validate(intent.model_dump())
    except ValidationError as exc:
        error = exc.errors()[0]
        name = ".".join(str(part) for part in error["loc"]) or "intent"
        raise InvalidIntent(name, error["msg"]) from exc


@dataclass(frozen=True)
class Submission:
    run: Run
    delivery: RunDelivery
    created: bool


@dataclass
class RunEngine:
    deps: Deps
    registry: WorkflowRegistry
    router: QueueRouter = field(default_factory=QueueRouter)
    coordinator: AdmissionCoordinator = field(default_factory=AdmissionCoordinator)
    evidence_debt: dict[UUID, int] = field(default_factory=dict)
    """Terminal Steps this process owes (shared with the worker; repaired by the relay)."""

    async def submit(self, intent: Intent, retain: RetentionHook | None = None) -> Submission:
        """Admit `intent` once; a replay with the same key returns the same Run."""
        intent = validated_intent(intent)
        run_id = idempotent_run_id(intent)
        lock_key = str(run_id) if run_id else None
        async with self.coordinator.admitting(lock_key, intent.session):
            if run_id is not None:
                prior = await self._ledger(lambda: self.deps.ledger.get_run(run_id))
                if prior is not None:
                    return await self._replay(prior, intent, retain)
            await self._fence_session(intent, run_id)
            run, delivery = self._records(intent, run_id, held=retain is not None)
            admission = await self._ledger(lambda: self.deps.ledger.admit_run(run, delivery))
            if admission.busy is not None:  # another Vessel's admission won the session
                raise SessionBusy(intent.session or "", admission.busy.id)
            if not admission.created and not own_commit(admission, run, delivery):
                return await self._replay(admission.run, intent, retain)
            await self.deps.faults.point(faults.ADMIT_COMMITTED, run_id=run.id)
            delivery = admission.delivery
            if delivery.state is DeliveryState.HELD:
                assert retain is not None
                delivery = await self._retain_and_release(admission.run, delivery, retain)
            if delivery.state is DeliveryState.PENDING:
                delivery = await self.publish(delivery)  # a later state is only observed
            return Submission(admission.run, delivery, created=True)

    def _records(self, intent: Intent, run_id: UUID | None, held: bool) -> tuple[Run, RunDelivery]:
        pattern = self.registry.latest(intent.pattern)
        route = self.router.route(intent, pattern)
        now = self.deps.clock.now()
        rid = run_id or self.deps.entropy.new_id()
        run = Run(
            id=rid,
            pattern=pattern.name,
            pattern_version=pattern.version,
            queue=route.queue,
            priority=route.priority,
            status=RunStatus.QUEUED,
            seq=0,
            session=intent.session,
            idempotency_scope=f"{intent.source}:{intent.sigil}" if run_id else None,
            idempotency_key=intent.idempotency_key,
            fingerprint=intent.fingerprint(),
            intent=intent,
            created_at=now,
            updated_at=now,
        )
        delivery = RunDelivery(
            run_id=rid,
            seq=0,
            state=DeliveryState.HELD if held else DeliveryState.PENDING,
            mode=ResumeMode.FRESH,
            queue=route.queue,
            priority=route.priority,
            held_by=intent.sigil if held else None,
            created_at=now,
            updated_at=now,
        )
        return run, delivery

    async def _fence_session(self, intent: Intent, run_id: UUID | None) -> None:
        """The fast path of the session fence: refuse before building records.
        The ledger decides in `admit_run`'s transaction all the same, which is
        what holds when several Vessels admit into one session at once."""
        if intent.session is None:
            return
        session = intent.session
        active = await self._ledger(
            lambda: self.deps.ledger.runs_in_session(
                session, AdmissionCoordinator.SESSION_LOOKUP_LIMIT
            )
        )
        for other in active:
            if other.id != run_id:
                raise SessionBusy(session, other.id)

    async def _replay(self, prior: Run, intent: Intent, retain: RetentionHook | None) -> Submission:
        """Return the prior admission, first resolving any custody it left behind."""
        if prior.fingerprint != intent.fingerprint():
            raise IdempotencyConflict(intent.idempotency_key or "", prior.id)
        delivery = await self._ledger(lambda: self.deps.ledger.get_delivery(prior.id, prior.seq))
        if delivery is None:
            raise InvalidIntent("idempotency_key", f"Run {prior.id} has no delivery {prior.seq}")
        if delivery.state is DeliveryState.HELD:
            if retain is None:
                raise HeldWithoutOwner(prior.id, delivery.seq)
            delivery = await self._retain_and_release(prior, delivery, retain)
        if delivery.state is DeliveryState.PENDING:
            delivery = await self.publish(delivery)
        run = await self._ledger(lambda: self.deps.ledger.get_run(prior.id)) or prior
        return Submission(run, delivery, created=False)

    async def _retain_and_release(
        self, run: Run, delivery: RunDelivery, retain: RetentionHook
    ) -> RunDelivery:
        """Run the caller's hook, then HELD -> PENDING for exactly this generation."""
        ledger, now = self.deps.ledger, self.deps.clock.now
        try:
            await retain(run)
        except BaseException as exc:
            # Also on caller cancellation: settle only this unpublished generation.
            with anyio.CancelScope(shield=True):
                await self._fail_held(run, delivery.seq, f"retention failed: {exc!r}")
            if isinstance(exc, Exception):
                raise RetentionFailed(f"Run {run.id}: retention hook failed: {exc}") from exc
            raise
        try:
            released = await self._ledger(lambda: ledger.release_held(run.id, delivery.seq, now()))
        except Exception:
            released = None
        if released is None or released.state is DeliveryState.HELD:
            return self._still_admitted(run, await self._resolve_release(run, delivery))
        self._still_admitted(run, released)
        await self.deps.faults.point(faults.RELEASE_COMMITTED, run_id=run.id)
        return released

    @staticmethod
    def _still_admitted(run: Run, delivery: RunDelivery) -> RunDelivery:
        """A held generation that another owner already failed is never handed out."""
        if delivery.state is DeliveryState.FAILED:
            raise RetentionFailed(
                f"Run {run.id}: held delivery {delivery.seq} was already failed by another owner"
            )
        return delivery

    async def _resolve_release(self, run: Run, delivery: RunDelivery) -> RunDelivery:
        """A release error is resolved from durable delivery state."""
        ledger = self.deps.ledger
        with anyio.CancelScope(shield=True):
            current = await self._ledger(lambda: ledger.get_delivery(run.id, delivery.seq))
            if current is not None and current.state is not DeliveryState.HELD:
                return current  # already advanced: the admission stands
            await self._fail_held(run, delivery.seq, "release failed")
        raise RetentionFailed(f"Run {run.id}: held delivery {delivery.seq} could not be released")

    async def _fail_held(self, run: Run, seq: int, reason: str) -> None:
        """Settle only that exact held generation, then its terminal Step (best effort)."""
        ledger, now = self.deps.ledger, self.deps.clock.now
        await self._ledger(lambda: ledger.fail_held(run.id, seq, reason, now()))
        failed = await self._ledger(lambda: ledger.get_run(run.id))
        if failed is not None and failed.status.terminal:
            await write_or_owe(self.deps, failed, self.evidence_debt)

    async def publish(self, delivery: RunDelivery) -> RunDelivery:
        """Publish one exact PENDING hop; a broker error leaves it for the relay.

        Whenever the publisher cannot record the acknowledgement (the broker's
        answer is lost, the caller is cancelled mid-publish, or the delivery
        was closed meanwhile) the job may have landed behind a cancellation:
        `_fence_late_job` then aborts it, shielded (seed 000, "Cancellation,
        mutation, and recovery"; runtime.publish_fence).
        """
        try:
            await self.deps.broker.publish(
                delivery.queue,
                delivery.key,
                run_id=delivery.run_id,
                seq=delivery.seq,
                priority=delivery.broker_priority,
                heartbeat=HEARTBEAT_S,
            )
        except BrokerUnavailable as exc:
            log.warning("publish of %s failed, left for the relay: %s", delivery.key, exc)
            with anyio.CancelScope(shield=True):
                await self._fence_late_job(delivery)
            return delivery
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):  # the fence first, then the disconnect
                await self._fence_late_job(delivery)
            raise
        await self.deps.faults.point(
            faults.PUBLISH_SENT_BEFORE_ACK, run_id=delivery.run_id, seq=delivery.seq
        )
        ledger, now = self.deps.ledger, self.deps.clock.now
        try:
            marked = await self._ledger(
                lambda: ledger.mark_published(delivery.run_id, delivery.seq, now())
            )
        except Exception as exc:
            log.warning("acknowledgement of %s not recorded, left for the relay: %s",
                        delivery.key, exc)
            return delivery
        if marked is not None and marked.state in (DeliveryState.PENDING, DeliveryState.FAILED):
            # The acknowledgement lost to a cancellation (CANCELLING keeps it PENDING,
            # CANCELLED closed it): the job may have landed behind the canceller's probe.
            with anyio.CancelScope(shield=True):
                await self._fence_late_job(delivery)
        return marked or delivery

    async def _fence_late_job(self, delivery: RunDelivery) -> LateJob:
        """Abort this exact hop's job if it landed behind its Run's cancellation."""
        return await fence_late_job(self.deps, delivery)

    async def _ledger(self, op: Callable[[], Awaitable[T]]) -> T:
        return await retrying(self.deps.entropy, op)
