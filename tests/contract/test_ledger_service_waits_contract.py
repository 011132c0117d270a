"""The Ledger contract for service waits, against every implementation.

A Run parks AWAITING_SERVICE only on an attempt it owns and its checkpoint
binds, and re-admits only through the owner CAS once that exact attempt is
terminal (seed 000_81a5c720b14d934a.txt, "Service job attempts"). The CAS
reads the attempt where the Run lives: the memory ledger's own service
store, or the same PostgreSQL database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import UUID

import pytest

from runtime.adapters.memory import MemoryLedger
from runtime.adapters.postgres.service_store import PostgresServiceStore
from runtime.models import CheckpointRecord, DeliveryState, ResumeMode, RunStatus
from runtime.seams import Ledger
from runtime.service import (
    AttemptOwner,
    CapabilityBinding,
    Evidence,
    EvidenceKind,
    ServiceAttemptStore,
    ServiceJobAttempt,
    ServiceOutcome,
    ServiceState,
    new_attempt,
)
from tests.contract.ledger_impls import LEDGER_KINDS, open_ledger
from tests.contract.ledger_records import at, uid
from tests.contract.test_ledger_waits_contract import running

pytestmark = pytest.mark.anyio

BINDING = CapabilityBinding(
    interface="render", profile_revision="r1", profile_digest="sha256:r1", operation="render",
    driver_revision="d1", dialect_revision="v1",
)  # fmt: skip


@dataclass
class Pair:
    ledger: Ledger
    store: ServiceAttemptStore


@pytest.fixture(params=LEDGER_KINDS)
async def pair(request: pytest.FixtureRequest, anyio_backend: str) -> AsyncIterator[Pair]:
    async with open_ledger(request.param, request, anyio_backend) as ledger:
        if isinstance(ledger, MemoryLedger):
            yield Pair(ledger, ledger.services)
            return
        store = await PostgresServiceStore.connect(request.getfixturevalue("pg_fresh_dsn"))
        try:
            yield Pair(ledger, store)
        finally:
            await store.close()


def attempt(n: int, run_id: UUID | None, t: float = 2) -> ServiceJobAttempt:
    return new_attempt(
        uid(300 + n), owner=AttemptOwner(job=f"run:{run_id}", run_id=run_id, station_attempt=0),
        idempotency_key=f"key-{n}", generation=0, request={"task": "render"}, binding=BINDING,
        now=at(t),
    )  # fmt: skip


def binding_checkpoint(run_id: UUID, attempt_id: UUID, seq: int = 0) -> CheckpointRecord:
    return CheckpointRecord(
        run_id=run_id, seq=seq, document={"history": []}, service_attempt_id=attempt_id,
        updated_at=at(2),
    )  # fmt: skip


async def finish(store: ServiceAttemptStore, attempt_id: UUID, t: float) -> None:
    await store.begin_submit(attempt_id, at(t))
    proof = Evidence(kind=EvidenceKind.ACCEPTED, at=at(t), transmission=1, provider_job_id="p-1")
    await store.accept(attempt_id, "p-1", proof, at(t))
    done = ServiceOutcome(state=ServiceState.SUCCEEDED, result={"ok": True})
    found = proof.model_copy(update={"kind": EvidenceKind.LOOKUP_FOUND})
    await store.settle(attempt_id, done, found, at(t))


async def test_checkpoint_keeps_the_service_attempt_it_binds(pair: Pair) -> None:
    run = await running(pair.ledger)
    assert await pair.ledger.save_checkpoint(binding_checkpoint(run.id, uid(301)))
    loaded = await pair.ledger.load_checkpoint(run.id)
    assert loaded is not None and loaded.service_attempt_id == uid(301)


async def test_park_service_needs_the_bound_attempt_of_this_run(pair: Pair) -> None:
    ledger, store = pair.ledger, pair.store
    run = await running(ledger)
    other = await running(ledger, n=2)
    mine, theirs = attempt(1, run.id), attempt(2, other.id)
    await store.prepare(mine)
    await store.prepare(theirs)
    assert await ledger.park_service(run.id, 0, mine.id, at(3)) is None  # no checkpoint
    await ledger.save_checkpoint(binding_checkpoint(run.id, theirs.id))
    assert await ledger.park_service(run.id, 0, theirs.id, at(3)) is None  # not its owner
    await ledger.save_checkpoint(binding_checkpoint(run.id, uid(399)))
    assert await ledger.park_service(run.id, 0, uid(399), at(3)) is None  # no attempt row
    await ledger.save_checkpoint(binding_checkpoint(run.id, mine.id))
    assert await ledger.park_service(run.id, 1, mine.id, at(3)) is None  # stale sequence
    parked = await ledger.park_service(run.id, 0, mine.id, at(4))
    assert parked == run.model_copy(update={
        "status": RunStatus.AWAITING_SERVICE, "service_attempt_id": mine.id, "updated_at": at(4),
    })  # fmt: skip
    assert await ledger.park_service(run.id, 0, mine.id, at(5)) == parked  # ambiguous repeat
    delivery = await ledger.get_delivery(run.id, 0)
    assert delivery is not None and delivery.state is DeliveryState.SETTLED
    assert await ledger.get_run(run.id) == parked


async def test_readmit_after_service_is_the_owner_cas_of_a_terminal_attempt(pair: Pair) -> None:
    ledger, store = pair.ledger, pair.store
    run = await running(ledger)
    mine = attempt(1, run.id)
    await store.prepare(mine)
    await ledger.save_checkpoint(binding_checkpoint(run.id, mine.id))
    assert await ledger.park_service(run.id, 0, mine.id, at(4)) is not None
    assert await ledger.readmit_after_service(run.id, mine.id, at(5)) is None  # PREPARED
    await finish(store, mine.id, 6)
    assert await ledger.readmit_after_service(run.id, uid(399), at(7)) is None  # not the owner
    fresh = await ledger.readmit_after_service(run.id, mine.id, at(8))
    assert fresh is not None
    assert (fresh.seq, fresh.mode, fresh.state) == (1, ResumeMode.RESUME, DeliveryState.PENDING)
    back = await ledger.get_run(run.id)
    assert back is not None and (back.status, back.seq) == (RunStatus.QUEUED, 1)
    assert await ledger.readmit_after_service(run.id, mine.id, at(9)) is None  # used once


async def test_a_running_run_is_not_readmitted_by_a_terminal_attempt(pair: Pair) -> None:
    ledger, store = pair.ledger, pair.store
    run = await running(ledger)
    mine = attempt(1, run.id)
    await store.prepare(mine)
    await finish(store, mine.id, 3)
    assert await ledger.readmit_after_service(run.id, mine.id, at(4)) is None
    again = await ledger.get_run(run.id)
    assert again is not None and again.status is RunStatus.RUNNING


async def test_owned_by_lists_the_attempts_of_one_run_in_order(pair: Pair) -> None:
    ledger, store = pair.ledger, pair.store
    run = await running(ledger)
    other = await running(ledger, n=2)
    second, first, theirs = attempt(1, run.id, t=5), attempt(2, run.id, t=3), attempt(3, other.id)
    for a in (second, first, theirs):
        await store.prepare(a)
    assert [a.id for a in await store.owned_by(run.id)] == [first.id, second.id]
    assert [a.id for a in await store.owned_by(other.id)] == [theirs.id]
    assert await store.owned_by(uid(999)) == []
