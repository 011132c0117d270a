"""The ServiceAttemptStore contract (seed 000_81a5c720b14d934a.txt, "Service job
attempts"), run against every store.

Memory on both anyio backends; PostgreSQL on a fresh migrated database per
test, asyncio only. The memory store is the reference: every transition, its
refusals and the round trip of the whole envelope must match.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

import anyio
import pytest

from runtime.adapters.memory.service_store import MemoryServiceStore
from runtime.adapters.postgres import migrate
from runtime.adapters.postgres.service_store import PostgresServiceStore
from runtime.adapters.reference_service import ReferenceServiceDriver
from runtime.service import (
    AttemptOwner,
    CapabilityBinding,
    Evidence,
    EvidenceKind,
    IllegalTransition,
    ProviderIdentityConflict,
    ProviderStatus,
    ResubmitRefused,
    ServiceAttemptStore,
    ServiceContext,
    ServiceEnvelope,
    ServiceJobAttempt,
    ServiceOutcome,
    ServicePayloadConflict,
    ServiceResultConflict,
    ServiceState,
    ToolBinding,
    UnknownAttempt,
    new_attempt,
    reconcile,
    submit,
)
from tests.contract.ledger_impls import LEDGER_KINDS, TRIO_SKIP
from tests.contract.ledger_records import at, uid
from tests.unit.fakes import FakeClock

pytestmark = pytest.mark.anyio

S = ServiceState
BINDING = CapabilityBinding(
    interface="speech.synthesize",
    profile_revision="r1",
    profile_digest="sha256:00",
    operation="tts",
    driver_revision="d1",
    dialect_revision="v2",
)
TOOL = ToolBinding(
    spell="transcode", resolution_lock="lock-9", tool_profile="tp", executor_profile="tomb-1"
)


@pytest.fixture(params=LEDGER_KINDS)
async def store(
    request: pytest.FixtureRequest, anyio_backend: str
) -> AsyncIterator[ServiceAttemptStore]:
    if request.param == "memory":
        yield MemoryServiceStore()
        return
    if anyio_backend != "asyncio":
        pytest.skip(TRIO_SKIP)
    dsn = request.getfixturevalue("pg_fresh_dsn")
    await migrate(dsn)
    pg = await PostgresServiceStore.connect(dsn, max_size=8)
    try:
        yield pg
    finally:
        await pg.close()


def attempt(
    n: int = 1,
    *,
    key: str | None = None,
    request: dict[str, object] | None = None,
    binding: CapabilityBinding | ToolBinding = BINDING,
    t: float = 0,
) -> ServiceJobAttempt:
    return new_attempt(
        uid(n),
        owner=AttemptOwner(job=f"job-{n}", run_id=uid(100 + n), station_attempt=2),
        idempotency_key=key or f"key-{n}",
        generation=1,
        request=request or {"text": "hello", "voices": ["a", "b"], "rate": 1.25},
        binding=binding,
        envelope=ServiceEnvelope(
            source_refs=("art:1",),
            destination="s3://bucket/out",
            purpose="narration",
            egress_decision="egress-7",
            policy_revisions={"egress": "p3"},
            reservation="gpu-slot-4",
        ),
        now=at(t),
    )


def ev(kind: EvidenceKind, t: float, transmission: int = 1, pid: str | None = None) -> Evidence:
    return Evidence(kind=kind, at=at(t), transmission=transmission, provider_job_id=pid)


async def current(store: ServiceAttemptStore, attempt_id: UUID) -> ServiceJobAttempt:
    got = await store.get(attempt_id)
    assert got is not None
    return got


async def accepted(store: ServiceAttemptStore, n: int = 1) -> ServiceJobAttempt:
    await store.prepare(attempt(n))
    await store.begin_submit(uid(n), at(1))
    return await store.accept(uid(n), f"prov-{n}", ev(EvidenceKind.ACCEPTED, 2), at(2))


# -- prepare --------------------------------------------------------------------------


async def test_prepare_persists_the_whole_envelope(store: ServiceAttemptStore) -> None:
    for a in (attempt(1), attempt(2, binding=TOOL)):
        assert await store.prepare(a) == a
        assert await current(store, a.id) == a
        assert await store.by_key(a.idempotency_key) == a
    assert await store.get(uid(3)) is None and await store.by_key("nope") is None


async def test_reads_hand_back_fresh_records(store: ServiceAttemptStore) -> None:
    """Every read decodes its own copy, as a PostgreSQL row does: equal ids, never the
    same objects, so an identity test (`is`) of ids fails on every store alike."""
    prepared = await store.prepare(attempt(1))
    reads = [
        await current(store, uid(1)),
        await store.by_key("key-1"),
        *await store.owned_by(prepared.owner.run_id),
    ]
    for got in reads:
        assert got is not None and got == prepared
        assert got.owner.run_id == prepared.owner.run_id
        assert got.owner.run_id is not prepared.owner.run_id and got is not prepared


async def test_prepare_repeats_for_identical_content(store: ServiceAttemptStore) -> None:
    first = await store.prepare(attempt(1))
    assert await store.prepare(attempt(1)) == first
    twin = attempt(9, key="key-1").model_copy(
        update={"owner": first.owner, "created_at": at(5), "updated_at": at(5)}
    )
    assert await store.prepare(twin) == first  # same key and content: adopt, no second row
    assert await store.get(uid(9)) is None


async def test_prepare_refuses_a_changed_payload_target_or_owner_for_a_key(
    store: ServiceAttemptStore,
) -> None:
    first = await store.prepare(attempt(1))
    with pytest.raises(ServicePayloadConflict):
        await store.prepare(attempt(1, request={"text": "goodbye"}))
    with pytest.raises(ServicePayloadConflict):
        await store.prepare(attempt(1, binding=TOOL))
    with pytest.raises(ServicePayloadConflict):
        await store.prepare(attempt(2, key="key-1"))  # another owner for the same key
    with pytest.raises(ServicePayloadConflict):
        await store.prepare(attempt(1, key="key-other"))  # the id bound to another key
    assert await current(store, first.id) == first
    assert await store.get(uid(2)) is None


async def test_concurrent_prepares_of_one_key_store_one_attempt(
    store: ServiceAttemptStore,
) -> None:
    got: list[ServiceJobAttempt] = []
    conflicts: list[Exception] = []

    async def go(n: int) -> None:
        a = attempt(n, key="shared").model_copy(
            update={"owner": AttemptOwner(job="job-1", run_id=uid(101), station_attempt=2)}
        )
        try:
            got.append(await store.prepare(a))
        except ServicePayloadConflict as exc:
            conflicts.append(exc)

    async with anyio.create_task_group() as tg:
        for n in range(1, 6):
            tg.start_soon(go, n)
    assert len({a.id for a in got}) == 1 and not conflicts


# -- transitions --------------------------------------------------------------------------


async def test_begin_submit_is_a_cas_from_prepared(store: ServiceAttemptStore) -> None:
    await store.prepare(attempt())
    sent = await store.begin_submit(uid(1), at(1))
    assert (sent.state, sent.transmissions, sent.version, sent.updated_at) == (
        S.SUBMITTING,
        1,
        2,
        at(1),
    )
    with pytest.raises(IllegalTransition):
        await store.begin_submit(uid(1), at(2))
    assert await current(store, uid(1)) == sent


async def test_accept_persists_the_provider_identity_once(store: ServiceAttemptStore) -> None:
    a = await accepted(store)
    assert (a.state, a.provider_job_id) == (S.ACCEPTED, "prov-1")
    assert [e.kind for e in a.evidence] == [EvidenceKind.ACCEPTED]
    again = await store.accept(uid(1), "prov-1", ev(EvidenceKind.LOOKUP_FOUND, 3), at(3))
    assert again == a
    with pytest.raises(ProviderIdentityConflict):
        await store.accept(uid(1), "prov-2", ev(EvidenceKind.LOOKUP_FOUND, 3), at(3))
    assert await current(store, uid(1)) == a


async def test_running_and_indeterminate_keep_what_is_known(store: ServiceAttemptStore) -> None:
    await accepted(store)
    running = await store.mark_running(uid(1), "page-3", at(3))
    assert (running.state, running.progress_cursor) == (S.RUNNING, "page-3")
    lost = await store.mark_indeterminate(uid(1), ev(EvidenceKind.LOOKUP_ABSENT, 4), at(4))
    assert (lost.state, lost.provider_job_id, lost.progress_cursor) == (
        S.INDETERMINATE,
        "prov-1",
        "page-3",
    )
    back = await store.mark_running(uid(1), "page-4", at(5))
    assert back.state is S.RUNNING
    await store.prepare(attempt(2))
    with pytest.raises(IllegalTransition):
        await store.mark_indeterminate(uid(2), ev(EvidenceKind.SUBMIT_ERROR, 4), at(4))


async def test_settle_needs_proof_and_keeps_terminal_truth(store: ServiceAttemptStore) -> None:
    await accepted(store)
    with pytest.raises(IllegalTransition):
        await store.settle(
            uid(1), ServiceOutcome(state=S.FAILED), ev(EvidenceKind.SUBMIT_TIMEOUT, 3), at(3)
        )
    outcome = ServiceOutcome(state=S.SUCCEEDED, result={"audio": "s3://x"}, usage={"seconds": 3.5})
    done = await store.settle(uid(1), outcome, ev(EvidenceKind.LOOKUP_FOUND, 4), at(4))
    assert (done.state, done.result, done.usage) == (
        S.SUCCEEDED,
        {"audio": "s3://x"},
        {"seconds": 3.5},
    )
    assert await store.settle(uid(1), outcome, ev(EvidenceKind.LOOKUP_FOUND, 5), at(5)) == done
    with pytest.raises(ServiceResultConflict):
        await store.settle(
            uid(1), ServiceOutcome(state=S.FAILED), ev(EvidenceKind.LOOKUP_FOUND, 5), at(5)
        )
    assert await store.mark_running(uid(1), "late", at(6)) == done
    assert await current(store, uid(1)) == done


async def test_a_rejected_submit_may_fail_before_acceptance(store: ServiceAttemptStore) -> None:
    await store.prepare(attempt())
    await store.begin_submit(uid(1), at(1))
    failed = await store.settle(
        uid(1),
        ServiceOutcome(state=S.FAILED, diagnostic={"rejected": "quota"}),
        ev(EvidenceKind.SUBMIT_REJECTED, 2),
        at(2),
    )
    assert failed.state is S.FAILED and failed.usage is None


async def test_a_rejection_of_an_earlier_transmission_fails_nothing(
    store: ServiceAttemptStore,
) -> None:
    """Found by the simulator: transmission 1 was rejected while another process had
    already re-submitted (transmission 2, which started a provider job); the late
    rejection must not settle FAILED."""
    await store.prepare(attempt())
    await store.begin_submit(uid(1), at(1))
    again = await store.begin_resubmit(uid(1), ev(EvidenceKind.SAME_KEY_REPLAY, 2), at(2))
    for kind in (EvidenceKind.SUBMIT_REJECTED, EvidenceKind.NO_EFFECT):
        with pytest.raises(IllegalTransition):
            await store.settle(uid(1), ServiceOutcome(state=S.FAILED), ev(kind, 3), at(3))
    with pytest.raises(IllegalTransition):
        await store.settle(
            uid(1), ServiceOutcome(state=S.CANCELLED), ev(EvidenceKind.NO_EFFECT, 3), at(3)
        )
    assert await current(store, uid(1)) == again
    failed = await store.settle(
        uid(1), ServiceOutcome(state=S.FAILED), ev(EvidenceKind.SUBMIT_REJECTED, 4, 2), at(4)
    )
    assert failed.state is S.FAILED


async def test_resubmit_needs_fresh_proof(store: ServiceAttemptStore) -> None:
    await store.prepare(attempt())
    await store.begin_submit(uid(1), at(1))
    with pytest.raises(ResubmitRefused):
        await store.begin_resubmit(uid(1), ev(EvidenceKind.LOOKUP_ABSENT, 2), at(2))
    again = await store.begin_resubmit(uid(1), ev(EvidenceKind.NO_EFFECT, 2), at(2))
    assert (again.state, again.transmissions) == (S.SUBMITTING, 2)
    with pytest.raises(ResubmitRefused):  # the proof observed transmission 1, not 2
        await store.begin_resubmit(uid(1), ev(EvidenceKind.NO_EFFECT, 3), at(3))
    replay = await store.begin_resubmit(uid(1), ev(EvidenceKind.SAME_KEY_REPLAY, 3, 2), at(3))
    assert replay.transmissions == 3
    assert await current(store, uid(1)) == replay


async def test_cancellation_intent_and_contained_cancel(store: ServiceAttemptStore) -> None:
    await store.prepare(attempt(1))
    asked = await store.request_cancel(uid(1), at(1))
    assert asked.cancel_requested_at == at(1)
    assert await store.request_cancel(uid(1), at(2)) == asked
    with pytest.raises(IllegalTransition):
        await store.begin_submit(uid(1), at(3))
    never = await store.settle(
        uid(1), ServiceOutcome(state=S.CANCELLED), ev(EvidenceKind.NEVER_SUBMITTED, 3, 0), at(3)
    )
    assert never.state is S.CANCELLED
    await accepted(store, 2)
    with pytest.raises(IllegalTransition):
        await store.settle(
            uid(2), ServiceOutcome(state=S.CANCELLED), ev(EvidenceKind.CANCEL_REQUESTED, 4), at(4)
        )
    contained = await store.settle(
        uid(2), ServiceOutcome(state=S.CANCELLED), ev(EvidenceKind.CANCEL_CONTAINED, 5), at(5)
    )
    assert contained.state is S.CANCELLED


async def test_unknown_attempts_are_refused(store: ServiceAttemptStore) -> None:
    with pytest.raises(UnknownAttempt):
        await store.begin_submit(uid(7), at(1))
    with pytest.raises(UnknownAttempt):
        await store.settle(
            uid(7), ServiceOutcome(state=S.FAILED), ev(EvidenceKind.LOOKUP_FOUND, 1), at(1)
        )
    assert await store.get(uid(7)) is None


async def test_open_attempts_pages_nonterminal_ones_in_creation_order(
    store: ServiceAttemptStore,
) -> None:
    for n in (3, 1, 2, 4):
        await store.prepare(attempt(n, t=n))
    await store.request_cancel(uid(4), at(9))
    await store.settle(
        uid(4), ServiceOutcome(state=S.CANCELLED), ev(EvidenceKind.NEVER_SUBMITTED, 9, 0), at(9)
    )
    first = await store.open_attempts(None, 2)
    assert [a.id for a in first] == [uid(1), uid(2)]
    rest = await store.open_attempts((first[-1].created_at, first[-1].id), 2)
    assert [a.id for a in rest] == [uid(3)]
    with pytest.raises(ValueError):
        await store.open_attempts(None, -1)


# -- the protocol over each store -----------------------------------------------------------


async def test_submit_and_reconcile_over_the_store(store: ServiceAttemptStore) -> None:
    driver = ReferenceServiceDriver()
    ctx = ServiceContext(store=store, driver=driver, clock=FakeClock(at(0)))
    driver.submit_faults.append("lose_ack")
    await store.prepare(attempt())
    lost = await submit(ctx, uid(1))
    assert lost.state is S.INDETERMINATE
    found = await reconcile(ctx, uid(1))
    assert (found.state, found.provider_job_id) == (S.ACCEPTED, "prov-1")
    driver.progress("prov-1", ProviderStatus.SUCCEEDED, result={"ok": 1}, usage={"s": 2})
    done = await reconcile(ctx, uid(1))
    assert (done.state, done.result, done.usage) == (S.SUCCEEDED, {"ok": 1}, {"s": 2})
    assert await current(store, uid(1)) == done
    assert driver.effects == ["prov-1"]
    assert [e.kind.value for e in done.evidence] == ["submit_error", "lookup_found", "lookup_found"]
