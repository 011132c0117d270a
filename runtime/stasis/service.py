"""Service waits: a Run parked AWAITING_SERVICE on one ServiceJobAttempt@1.

Seed 000_81a5c720b14d934a.txt, "Service job attempts". The hop persists the
attempt (PREPARED, owned by this Run and hop) before anything is sent, parks
the Run on it, and only then asks for the first transmission, so a fenced
hop never sends and a crash anywhere leaves a state recovery can read:

- checkpoint saved, no attempt: the orphan fails as lost (nothing was sent);
- attempt PREPARED, Run still RUNNING: startup parks the exact window;
- Run parked, attempt PREPARED: `refresh_service` sends it (the CAS to
  SUBMITTING makes the hop's own send and a relay's mutually exclusive);
- anything later: `refresh_service` reconciles by lookup, never re-sends
  without the proof `runtime.service.attempts` demands.

The Run resumes only through `Ledger.readmit_after_service`, the owner CAS
that needs this exact attempt to be terminal.
"""

from __future__ import annotations

import logging
from uuid import UUID

from runtime import faults
from runtime.engine import RunEngine
from runtime.graph.transitions import AwaitService
from runtime.models import Run, RunDelivery, RunStatus
from runtime.retry import retrying
from runtime.seams import Deps
from runtime.service.attempts import ServiceContext, new_attempt, reconcile, submit
from runtime.service.errors import ServiceError
from runtime.service.models import AttemptOwner, ServiceJobAttempt, ServiceState

log = logging.getLogger(__name__)


def service_key(run_id: UUID, seq: int) -> str:
    """The idempotency identity of the one service call a hop may make."""
    return f"run:{run_id}:{seq}:service"


def owner_of(run: Run, seq: int) -> AttemptOwner:
    return AttemptOwner(job=f"run:{run.id}", run_id=run.id, station_attempt=seq)


def attempt_for(deps: Deps, run: Run, seq: int, attempt_id: UUID,
                t: AwaitService) -> ServiceJobAttempt:
    return new_attempt(
        attempt_id,
        owner=owner_of(run, seq),
        idempotency_key=service_key(run.id, seq),
        generation=0,
        request=t.request,
        binding=t.binding,
        now=deps.clock.now(),
    )


async def send(services: ServiceContext, attempt_id: UUID) -> ServiceJobAttempt | None:
    """The first transmission of a parked attempt, or a reconciliation when it
    already left PREPARED. Refusals stay on the attempt for the next relay
    pass; None when nothing could be read or decided this time."""
    try:
        attempt = await services.store.get(attempt_id)
        if attempt is None or attempt.state.terminal:
            return attempt
        if attempt.state is ServiceState.PREPARED:
            return await submit(services, attempt_id)
        return await reconcile(services, attempt_id)
    except ServiceError as exc:
        log.warning("service attempt %s not advanced: %r", attempt_id, exc)
    except Exception as exc:  # storage or provider trouble: the relay tries again
        log.warning("service attempt %s: %r", attempt_id, exc)
    return None


async def terminal_owner(deps: Deps, run: Run, attempt_id: UUID) -> ServiceJobAttempt | None:
    """The attempt a resumed hop reads: terminal and owned by exactly this Run."""
    if deps.services is None or run.service_attempt_id != attempt_id:
        return None
    store = deps.services.store
    # A read: retried through a blip, for a resumed hop whose attempt already
    # succeeded must not fail its Run on a connection error (issue M11).
    attempt = await retrying(deps.entropy, lambda: store.get(attempt_id))
    if attempt is None or attempt.owner.run_id != run.id or not attempt.state.terminal:
        return None
    return attempt


async def refresh_service(engine: RunEngine, run: Run) -> RunDelivery | None:
    """Advance the attempt a parked Run waits on; re-admit it once terminal."""
    deps = engine.deps
    if run.status is not RunStatus.AWAITING_SERVICE or run.service_attempt_id is None:
        return None
    if deps.services is None:
        log.error("Run %s waits on service attempt %s but no service is configured",
                  run.id, run.service_attempt_id)
        return None
    attempt = await send(deps.services, run.service_attempt_id)
    if attempt is None or not attempt.state.terminal:
        return None
    delivery = await deps.ledger.readmit_after_service(run.id, attempt.id, deps.clock.now())
    if delivery is None:
        return None
    await deps.faults.point(faults.READMIT_COMMITTED, run_id=run.id)
    return await engine.publish(delivery)

