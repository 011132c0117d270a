"""Consent verdicts and the re-admission they cause (seed 000, "Events,
settlement, and waits"; seed 003, "Return makes a new claim").

A verdict carries its decision principal and time. The owner-specific CAS
then moves AWAITING_CONSENT -> QUEUED with a fresh PENDING resume delivery,
which is published; a publish failure leaves that hop to the delivery relay.
Duplicate verdicts are inert, and concurrent handlers converge because the
CAS succeeds once.
"""

from __future__ import annotations

from uuid import UUID

from runtime import faults
from runtime.engine import RunEngine
from runtime.errors import NotFound, RuntimeEngineError
from runtime.models import Consent, ConsentStatus, Run, RunDelivery, RunStatus


class ConsentRefused(RuntimeEngineError):
    """A verdict that cannot be recorded; says which rule refused it."""

    def __init__(self, consent_id: UUID, reason: str) -> None:
        super().__init__(f"consent {consent_id}: {reason}")
        self.field = "consent"
        self.reason = reason


async def decide(engine: RunEngine, consent_id: UUID, approve: bool, principal: str) -> Consent:
    ledger, now = engine.deps.ledger, engine.deps.clock.now
    consent = await ledger.get_consent(consent_id)
    if consent is None:
        raise NotFound("consent", consent_id)
    if consent.owner != principal:
        raise ConsentRefused(consent_id, f"principal {principal!r} does not own this consent")
    decided = await ledger.decide_consent(consent_id, approve, principal, now())
    if decided is None:
        raise NotFound("consent", consent_id)
    wanted = ConsentStatus.APPROVED if approve else ConsentStatus.DENIED
    if decided.status is ConsentStatus.CANCELLED:
        raise ConsentRefused(consent_id, "it was cancelled")
    if decided.status is not wanted:
        raise ConsentRefused(consent_id, f"already decided {decided.status.value}")
    await engine.deps.faults.point(faults.CONSENT_DECIDED, consent_id=consent_id)
    run = await ledger.get_run(decided.run_id)
    if run is not None:
        await refire_consent(engine, run)
    return decided


async def refire_consent(engine: RunEngine, run: Run) -> RunDelivery | None:
    """Re-admit a Run parked on a decided consent (startup, relay and verdicts share it)."""
    if run.status is not RunStatus.AWAITING_CONSENT or run.consent_id is None:
        return None
    delivery = await engine.deps.ledger.readmit_after_consent(
        run.id, run.consent_id, engine.deps.clock.now()
    )
    if delivery is None:
        return None
    await engine.deps.faults.point(faults.READMIT_COMMITTED, run_id=run.id)
    return await engine.publish(delivery)
