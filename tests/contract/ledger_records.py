"""Record factories for ledger tests: Runs and deliveries at chosen times and states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from runtime.models import DeliveryState, Intent, ResumeMode, Run, RunDelivery, RunStatus

if TYPE_CHECKING:
    from runtime.seams import Ledger

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 plus `seconds`: the tests' clock readings."""
    return T0 + timedelta(seconds=seconds)


def uid(n: int) -> UUID:
    """A readable, ordered UUID: uid(1) < uid(2) < ..."""
    return UUID(int=n)


def make_run(
    run_id: UUID,
    *,
    created: float = 0,
    updated: float | None = None,
    status: RunStatus = RunStatus.QUEUED,
    seq: int = 0,
    session: str | None = None,
    prompt: str = "hello",
    started: float | None = None,
    priority: int = 50,
) -> Run:
    intent = Intent(
        pattern="echo",
        prompt=prompt,
        session=session,
        scopes=("read", "write"),
        content={"n": 1, "nested": {"list": [1, 2.5, "x", None, True]}},
    )
    return Run(
        id=run_id,
        pattern="echo",
        pattern_version=1,
        queue="runs",
        priority=priority,
        status=status,
        seq=seq,
        session=session,
        fingerprint=intent.fingerprint(),
        intent=intent,
        created_at=at(created),
        updated_at=at(created if updated is None else updated),
        started_at=None if started is None else at(started),
    )


def make_delivery(
    run: Run,
    *,
    state: DeliveryState = DeliveryState.PENDING,
    mode: ResumeMode = ResumeMode.FRESH,
    claimed_boot: str | None = None,
    claim_token: str | None = None,
) -> RunDelivery:
    return RunDelivery(
        run_id=run.id,
        seq=run.seq,
        state=state,
        mode=mode,
        queue=run.queue,
        priority=run.priority,
        held_by="sigil" if state is DeliveryState.HELD else None,
        claimed_boot=claimed_boot,
        claim_token=claim_token,
        created_at=run.created_at,
        updated_at=run.created_at,
    )


async def runs_for_steps(ledger: Ledger, *ns: int) -> list[UUID]:
    """Admit Runs uid(n) for each n (QUEUED, PENDING delivery): Steps name an
    admitted Run, so a test that only writes Steps admits their Runs first."""
    ids = [uid(n) for n in ns]
    for run_id in ids:
        run = make_run(run_id)
        await ledger.admit_run(run, make_delivery(run))
    return ids
