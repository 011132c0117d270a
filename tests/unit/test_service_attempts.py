"""ServiceJobAttempt@1, one test per rule of seed 000_81a5c720b14d934a.txt,
"Service job attempts (Designed)".

Memory store, both anyio backends, a FakeClock, and the deterministic
ReferenceServiceDriver with queued faults (lost and malformed
acknowledgements, hangs, dropped requests, lying lookups).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import anyio
import pytest

from runtime.adapters.memory.service_store import MemoryServiceStore
from runtime.adapters.reference_service import ReferenceServiceDriver
from runtime.errors import ProcessCrashed
from runtime.service import (
    ENVELOPE,
    AttemptOwner,
    CapabilityBinding,
    EgressDenied,
    Evidence,
    EvidenceKind,
    IllegalTransition,
    ProviderReport,
    ProviderStatus,
    ResubmitRefused,
    ServiceContext,
    ServiceEnvelope,
    ServiceJobAttempt,
    ServiceOutcome,
    ServicePayloadConflict,
    ServiceResultConflict,
    ServiceState,
    ServiceSubmission,
    SubmitAck,
    ToolBinding,
    UnknownAttempt,
    cancel,
    new_attempt,
    prepare,
    reconcile,
    reconcile_open,
    submit,
)
from tests.bounds import HANG_S
from tests.unit.fakes import FakeClock

pytestmark = pytest.mark.anyio

S = ServiceState
BINDING = CapabilityBinding(
    interface="image.generate",
    profile_revision="r7",
    profile_digest="sha256:abc",
    operation="render",
    driver_revision="d3",
    dialect_revision="v1",
)
OWNER = AttemptOwner(job="render-job-1", run_id=UUID(int=42), station_attempt=0)


class World:
    def __init__(self, driver: ReferenceServiceDriver | None = None, **ctx: Any) -> None:
        self.clock = FakeClock()
        self.store = MemoryServiceStore()
        self.driver = driver or ReferenceServiceDriver()
        self.ctx = ServiceContext(store=self.store, driver=self.driver, clock=self.clock, **ctx)
        self._n = 0

    def attempt(
        self, key: str = "key-1", request: dict[str, Any] | None = None
    ) -> ServiceJobAttempt:
        self._n += 1
        return new_attempt(
            UUID(int=self._n),
            owner=OWNER,
            idempotency_key=key,
            generation=0,
            request=request if request is not None else {"prompt": "a lighthouse"},
            binding=BINDING,
            envelope=ServiceEnvelope(destination="s3://out", purpose="illustration"),
            now=self.clock.now(),
        )

    async def prepared(self, key: str = "key-1") -> ServiceJobAttempt:
        return await prepare(self.ctx, self.attempt(key))

    async def get(self, attempt_id: UUID) -> ServiceJobAttempt:
        attempt = await self.store.get(attempt_id)
        assert attempt is not None
        return attempt


def kinds(attempt: ServiceJobAttempt) -> list[str]:
    return [e.kind.value for e in attempt.evidence]


# -- the envelope --------------------------------------------------------------------


async def test_the_attempt_is_persisted_prepared_with_its_identity_before_any_submit() -> None:
    w = World()
    attempt = await w.prepared()
    stored = await w.get(attempt.id)
    assert stored.state is S.PREPARED and stored.transmissions == 0
    assert stored.owner == OWNER and stored.generation == 0
    assert stored.idempotency_key == "key-1" and len(stored.request_digest) == 64
    assert stored.binding == BINDING and stored.envelope.destination == "s3://out"
    assert stored.usage is None and stored.provider_job_id is None
    assert w.driver.transmissions == [] and ENVELOPE == "ServiceJobAttempt@1"


async def test_the_execution_binding_is_one_discriminated_kind_inside_the_digest() -> None:
    w = World()
    capability = w.attempt()
    tool = capability.model_copy(
        update={
            "binding": ToolBinding(
                spell="upscale",
                resolution_lock="lock-1",
                tool_profile="tp-2",
                executor_profile="tomb-a",
            ),
            "request_digest": "",
        }
    )
    tool = ServiceJobAttempt.model_validate(tool.model_dump())
    assert tool.binding.kind == "tool" and capability.binding.kind == "capability"
    assert tool.request_digest != capability.request_digest
    again = ServiceJobAttempt.model_validate(tool.model_dump(mode="json"))
    assert again == tool


async def test_prepare_repeats_for_the_same_content_and_the_same_key() -> None:
    w = World()
    first = await w.prepared()
    assert await prepare(w.ctx, first) == first
    twin = w.attempt()  # another id, same key and content: adopt the stored one
    assert await prepare(w.ctx, twin) == first
    assert list(w.store.attempt_table) == [first.id]


# -- submit ----------------------------------------------------------------------------


class SpyDriver(ReferenceServiceDriver):
    """Records the stored state of the attempt at the moment the driver is called."""

    store: MemoryServiceStore | None = None
    seen: list[tuple[ServiceState, int]] = []

    async def submit(self, submission: ServiceSubmission) -> SubmitAck:
        assert self.store is not None
        stored = self.store.attempt_table[submission.attempt_id]
        self.seen.append((stored.state, stored.transmissions))
        return await super().submit(submission)


async def test_the_cas_to_submitting_happens_before_the_driver_is_called() -> None:
    driver = SpyDriver()
    driver.seen = []
    w = World(driver)
    driver.store = w.store
    attempt = await w.prepared()
    done = await submit(w.ctx, attempt.id)
    assert driver.seen == [(S.SUBMITTING, 1)]
    assert done.state is S.ACCEPTED


async def test_the_provider_job_identity_is_persisted_with_accepted() -> None:
    w = World()
    attempt = await w.prepared()
    done = await submit(w.ctx, attempt.id)
    assert (done.state, done.provider_job_id) == (S.ACCEPTED, "prov-1")
    assert await w.get(attempt.id) == done
    assert kinds(done) == ["accepted"] and done.evidence[0].provider_job_id == "prov-1"
    assert w.driver.transmissions[0].idempotency_key == "key-1"


async def test_a_second_submit_loses_the_cas_and_sends_nothing() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    with pytest.raises(IllegalTransition):
        await submit(w.ctx, attempt.id)
    assert len(w.driver.transmissions) == 1 and w.driver.effects == ["prov-1"]


async def test_concurrent_submitters_transmit_once() -> None:
    w = World()
    attempt = await w.prepared()
    refused: list[BaseException] = []

    async def go() -> None:
        try:
            await submit(w.ctx, attempt.id)
        except IllegalTransition as exc:
            refused.append(exc)

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(go)
    assert len(refused) == 3 and len(w.driver.transmissions) == 1


async def test_a_submit_timeout_is_indeterminate_never_failed() -> None:
    w = World(deadline_s=0.05)
    w.driver.submit_faults.append("hang")
    attempt = await w.prepared()
    with anyio.fail_after(HANG_S):
        after = await submit(w.ctx, attempt.id)
    assert after.state is S.INDETERMINATE and after.result is None
    assert kinds(after) == ["submit_timeout"]


async def test_a_lost_acknowledgement_is_indeterminate_and_reconciles_by_key() -> None:
    w = World()
    w.driver.submit_faults.append("lose_ack")
    attempt = await w.prepared()
    lost = await submit(w.ctx, attempt.id)
    assert lost.state is S.INDETERMINATE and lost.provider_job_id is None
    found = await reconcile(w.ctx, attempt.id)
    assert (found.state, found.provider_job_id) == (S.ACCEPTED, "prov-1")
    assert w.driver.effects == ["prov-1"] and len(w.driver.transmissions) == 1
    assert kinds(found) == ["submit_error", "lookup_found"]


async def test_a_malformed_acknowledgement_is_indeterminate() -> None:
    w = World()
    w.driver.submit_faults.append("malformed_ack")
    attempt = await w.prepared()
    after = await submit(w.ctx, attempt.id)
    assert after.state is S.INDETERMINATE and kinds(after) == ["malformed_ack"]
    assert (await reconcile(w.ctx, attempt.id)).provider_job_id == "prov-1"


async def test_a_crash_after_the_cas_leaves_the_attempt_submitting() -> None:
    class Dying(ReferenceServiceDriver):
        async def submit(self, submission: ServiceSubmission) -> SubmitAck:
            await super().submit(submission)
            raise ProcessCrashed("killed after transmission")

    w = World(Dying())
    attempt = await w.prepared()
    with pytest.raises(ProcessCrashed):
        await submit(w.ctx, attempt.id)
    after = await w.get(attempt.id)
    assert (after.state, after.transmissions, after.evidence) == (S.SUBMITTING, 1, ())
    recovered = await reconcile(w.ctx, attempt.id)  # the next boot
    assert recovered.state is S.ACCEPTED and w.driver.effects == ["prov-1"]


async def test_only_a_proved_rejection_fails_a_submit() -> None:
    w = World()
    w.driver.submit_faults.append("reject")
    attempt = await w.prepared()
    after = await submit(w.ctx, attempt.id)
    assert after.state is S.FAILED and kinds(after) == ["submit_rejected"]
    assert w.driver.effects == []


async def test_a_submit_is_refused_once_cancellation_was_requested() -> None:
    w = World()
    attempt = await w.prepared()
    await w.store.request_cancel(attempt.id, w.clock.now())
    with pytest.raises(IllegalTransition):
        await submit(w.ctx, attempt.id)
    assert w.driver.transmissions == []


async def test_the_egress_decision_is_asked_before_every_transmission() -> None:
    asked: list[int] = []
    allow = True

    async def egress(attempt: ServiceJobAttempt) -> bool:
        asked.append(attempt.transmissions)
        return allow

    w = World(egress=egress)
    w.driver.submit_faults.append("drop")
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    await reconcile(w.ctx, attempt.id)  # proven absent: a second transmission
    assert asked == [0, 1] and len(w.driver.transmissions) == 2
    other = await w.prepared("key-2")
    allow = False
    with pytest.raises(EgressDenied):
        await submit(w.ctx, other.id)
    assert (await w.get(other.id)).state is S.PREPARED


# -- reconciliation ---------------------------------------------------------------------


async def test_reconcile_resubmits_only_on_proof_of_no_effect() -> None:
    w = World()
    w.driver.submit_faults.append("drop")  # never reached the provider
    attempt = await w.prepared()
    assert (await submit(w.ctx, attempt.id)).state is S.INDETERMINATE
    after = await reconcile(w.ctx, attempt.id)
    assert (after.state, after.transmissions, after.provider_job_id) == (S.ACCEPTED, 2, "prov-1")
    assert kinds(after) == ["submit_error", "no_effect", "accepted"]
    assert w.driver.effects == ["prov-1"]


async def test_without_proof_an_absent_job_stays_indeterminate_and_nothing_is_resent() -> None:
    w = World(ReferenceServiceDriver(lookup_proves_absence=False, replays_same_key=False))
    w.driver.submit_faults.append("drop")
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    after = await reconcile(w.ctx, attempt.id)
    assert after.state is S.INDETERMINATE and after.transmissions == 1
    assert kinds(after)[-1] == "lookup_absent" and len(w.driver.transmissions) == 1


async def test_a_same_key_replay_driver_may_resubmit_and_gets_the_original_job() -> None:
    w = World(ReferenceServiceDriver(lookup_proves_absence=False, replays_same_key=True))
    w.driver.submit_faults.append("lose_ack")
    w.driver.lookup_faults.append("hide")  # the lookup misses the job it has
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    after = await reconcile(w.ctx, attempt.id)
    assert (after.state, after.provider_job_id, after.transmissions) == (S.ACCEPTED, "prov-1", 2)
    assert w.driver.effects == ["prov-1"]  # replayed, not started twice
    assert "same_key_replay" in kinds(after)


async def test_the_domain_policy_may_refuse_a_resubmit_even_with_proof() -> None:
    w = World(resubmit=False)
    w.driver.submit_faults.append("drop")
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    after = await reconcile(w.ctx, attempt.id)
    assert after.state is S.INDETERMINATE and len(w.driver.transmissions) == 1


async def test_a_stale_proof_never_authorises_a_second_resubmit() -> None:
    w = World()
    w.driver.submit_faults.append("drop")
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    proof = Evidence(kind=EvidenceKind.NO_EFFECT, at=w.clock.now(), transmission=1)
    await w.store.begin_resubmit(attempt.id, proof, w.clock.now())
    with pytest.raises(ResubmitRefused):
        await w.store.begin_resubmit(attempt.id, proof, w.clock.now())
    assert (await w.get(attempt.id)).transmissions == 2


async def test_no_effect_proof_cannot_resubmit_an_acknowledged_job() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    await w.store.mark_indeterminate(
        attempt.id,
        Evidence(kind=EvidenceKind.LOOKUP_FAILED, at=w.clock.now(), transmission=1),
        w.clock.now(),
    )
    proof = Evidence(kind=EvidenceKind.NO_EFFECT, at=w.clock.now(), transmission=1)
    with pytest.raises(ResubmitRefused):
        await w.store.begin_resubmit(attempt.id, proof, w.clock.now())


async def test_reconcile_adopts_progress_and_terminal_results_with_usage() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    w.driver.progress("prov-1", ProviderStatus.RUNNING, cursor="50%")
    running = await reconcile(w.ctx, attempt.id)
    assert (running.state, running.progress_cursor) == (S.RUNNING, "50%")
    usage = {"gpu_seconds": 12.5}
    w.driver.progress("prov-1", ProviderStatus.SUCCEEDED, result={"url": "s3://out/1"}, usage=usage)
    done = await reconcile(w.ctx, attempt.id)
    assert (done.state, done.result, done.usage) == (S.SUCCEEDED, {"url": "s3://out/1"}, usage)
    assert await reconcile(w.ctx, attempt.id) == done  # terminal: nothing more


async def test_a_provider_reported_failure_is_the_only_failure_after_acceptance() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    w.driver.progress("prov-1", ProviderStatus.FAILED)
    done = await reconcile(w.ctx, attempt.id)
    assert done.state is S.FAILED and done.usage is None  # unknown, not zero


async def test_an_acknowledged_job_the_provider_forgets_is_indeterminate_not_failed() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    w.driver.jobs.clear()
    after = await reconcile(w.ctx, attempt.id)
    assert after.state is S.INDETERMINATE and after.provider_job_id == "prov-1"
    assert len(w.driver.transmissions) == 1


async def test_a_failed_lookup_only_adds_evidence() -> None:
    w = World()
    attempt = await w.prepared()
    accepted = await submit(w.ctx, attempt.id)
    w.driver.lookup_faults.append("fail")
    after = await reconcile(w.ctx, attempt.id)
    assert after.state is S.ACCEPTED and kinds(after) == ["accepted", "lookup_failed"]
    assert after.version == accepted.version + 1


async def test_reconcile_open_pages_every_nonterminal_attempt() -> None:
    w = World()
    ids = []
    for n in range(5):
        w.driver.submit_faults.append("lose_ack")
        attempt = await w.prepared(f"key-{n}")
        await submit(w.ctx, attempt.id)
        ids.append(attempt.id)
    seen = await reconcile_open(w.ctx, page=2)
    assert [a.id for a in seen] == ids
    assert all(a.state is S.ACCEPTED for a in seen)
    assert len(w.driver.effects) == 5


# -- cancellation -------------------------------------------------------------------------


async def test_cancelling_a_prepared_attempt_contacts_no_provider() -> None:
    w = World()
    attempt = await w.prepared()
    after = await cancel(w.ctx, attempt.id)
    assert after.state is S.CANCELLED and kinds(after) == ["cancel_requested", "never_submitted"]
    assert w.driver.transmissions == []


async def test_cancelled_is_recorded_only_after_containment_is_proved() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    w.driver.progress("prov-1", ProviderStatus.RUNNING)
    w.driver.cancel_faults.append("refuse")
    refused = await cancel(w.ctx, attempt.id)
    assert refused.state is S.RUNNING and refused.cancel_requested_at is not None
    assert "cancel_unacknowledged" in kinds(refused)
    contained = await cancel(w.ctx, attempt.id)
    assert contained.state is S.CANCELLED
    assert contained.evidence[-1].kind is EvidenceKind.CANCEL_CONTAINED


async def test_a_lost_cancellation_acknowledgement_settles_only_through_reconciliation() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    w.driver.cancel_faults.append("lose_ack")
    w.driver.lookup_faults.append("fail")
    first = await cancel(w.ctx, attempt.id)
    assert first.state is S.ACCEPTED  # unknown whether it stopped: not CANCELLED
    assert kinds(first)[-2:] == ["cancel_unacknowledged", "lookup_failed"]
    second = await reconcile(w.ctx, attempt.id)
    assert second.state is S.CANCELLED  # the provider shows it contained


async def test_a_job_that_finished_before_containment_keeps_its_result() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    w.driver.progress("prov-1", ProviderStatus.SUCCEEDED, result={"ok": True})
    after = await cancel(w.ctx, attempt.id)
    assert after.state is S.SUCCEEDED and after.result == {"ok": True}
    assert after.cancel_requested_at is not None


# -- bad input ------------------------------------------------------------------------


async def test_a_changed_payload_for_the_same_key_is_refused() -> None:
    w = World()
    first = await w.prepared()
    changed = w.attempt(request={"prompt": "a storm"})
    with pytest.raises(ServicePayloadConflict):
        await prepare(w.ctx, changed)
    retarget = first.model_copy(
        update={"envelope": ServiceEnvelope(destination="s3://elsewhere"), "request_digest": ""}
    )
    with pytest.raises(ServicePayloadConflict):
        await prepare(w.ctx, ServiceJobAttempt.model_validate(retarget.model_dump()))
    assert list(w.store.attempt_table.values()) == [first]


async def test_a_provider_result_with_a_changed_payload_for_the_key_is_refused() -> None:
    w = World()
    w.driver.submit_faults.append("lose_ack")
    attempt = await w.prepared()
    lost = await submit(w.ctx, attempt.id)
    job = w.driver.jobs["prov-1"]
    w.driver.jobs["prov-1"] = job.model_copy(update={"request_digest": "f" * 64})
    with pytest.raises(ServicePayloadConflict):
        await reconcile(w.ctx, attempt.id)
    assert await w.get(attempt.id) == lost


async def test_a_provider_refusing_a_reused_key_is_a_payload_conflict() -> None:
    w = World()
    attempt = await w.prepared()
    w.driver.by_key["key-1"] = "prov-9"
    w.driver.jobs["prov-9"] = ProviderReport(
        provider_job_id="prov-9",
        idempotency_key="key-1",
        request_digest="0" * 64,
        status=ProviderStatus.RUNNING,
    )
    with pytest.raises(ServicePayloadConflict):
        await submit(w.ctx, attempt.id)
    after = await w.get(attempt.id)
    assert after.state is S.SUBMITTING and after.provider_job_id is None


async def test_a_terminal_attempt_refuses_a_different_settlement() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    w.driver.progress("prov-1", ProviderStatus.SUCCEEDED, result={"n": 1})
    done = await reconcile(w.ctx, attempt.id)
    found = Evidence(kind=EvidenceKind.LOOKUP_FOUND, at=w.clock.now(), transmission=1)
    same = ServiceOutcome(state=S.SUCCEEDED, result={"n": 1})
    assert await w.store.settle(attempt.id, same, found, w.clock.now()) == done
    with pytest.raises(ServiceResultConflict):
        await w.store.settle(
            attempt.id, ServiceOutcome(state=S.SUCCEEDED, result={"n": 2}), found, w.clock.now()
        )
    assert await w.get(attempt.id) == done


async def test_failure_is_never_fabricated_without_proof() -> None:
    w = World()
    attempt = await w.prepared()
    await submit(w.ctx, attempt.id)
    timeout = Evidence(kind=EvidenceKind.SUBMIT_TIMEOUT, at=w.clock.now(), transmission=1)
    with pytest.raises(IllegalTransition):
        await w.store.settle(attempt.id, ServiceOutcome(state=S.FAILED), timeout, w.clock.now())
    assert (await w.get(attempt.id)).state is S.ACCEPTED


async def test_an_unknown_attempt_is_refused() -> None:
    w = World()
    ghost = UUID(int=999)
    with pytest.raises(UnknownAttempt):
        await submit(w.ctx, ghost)
    with pytest.raises(UnknownAttempt):
        await reconcile(w.ctx, ghost)
    with pytest.raises(UnknownAttempt):
        await cancel(w.ctx, ghost)
    assert w.store.attempt_table == {}
