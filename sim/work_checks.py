"""Invariants of leased jobs (seed 004) and service attempts (seed 000).

Like the rest of the checker these read only durable records (the world's
job and service stores), the external actors' own books (the model
provider's calls, the service provider's jobs) and the trace, never a
worker's memory. `after_*_write` runs after every committed store write and
compares the records with those seen after the previous write; `final` runs
once the world has healed. Violations go through `Checker.fail`, which
raises to stop the check.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from runtime.jobs.errors import (
    AttemptClosed,
    CallBudgetExhausted,
    JobError,
    LeaseExpired,
    ModelVersionMismatch,
    NotLeaseOwner,
    NotReprocessable,
    StaleFence,
)
from runtime.jobs.models import (
    STAGED_STATES,
    EventKind,
    EvidenceRecord,
    Interpretation,
    JobState,
    LeasedJob,
)
from runtime.service import models as service_models
from runtime.service.attempts import ABSENCE_NOT_PROOF, ACKNOWLEDGED_JOB_GONE
from runtime.service.driver import ProviderStatus
from runtime.service.models import (
    RESUBMIT_PROOFS,
    Evidence,
    EvidenceKind,
    ServiceJobAttempt,
    ServiceOutcome,
    ServiceState,
)

if TYPE_CHECKING:
    from sim.checker import Checker
    from sim.leased import CallKey, ModelCall

FAILED_PROOFS = (EvidenceKind.SUBMIT_REJECTED, EvidenceKind.NO_EFFECT)
CONTAINMENT = (
    EvidenceKind.LOOKUP_ABSENT,
    EvidenceKind.NO_EFFECT,
    EvidenceKind.SAME_KEY_REPLAY,
    EvidenceKind.CANCEL_REQUESTED,
    EvidenceKind.CANCEL_CONTAINED,
    EvidenceKind.CANCEL_UNACKNOWLEDGED,
)
"""Evidence that records why an INDETERMINATE attempt is left unresolved."""

# The oracle's own reading of seed 004 (never the runtime's constants, which
# the mutation tool changes): a lease lasts 90 s (every simulated worker uses
# the default) and is renewed at most every 20 s, a retry after attempt n waits
# min(60, 5 * 2**(n-1)) s (the policy defaults every simulated job keeps), and only
# a job whose processing ended (staged, waiting, failed or exhausted) is
# reprocessed.
RENEW_EVERY_S = 20.0
LEASE_S = 90.0
RETRY_BASE_S, RETRY_MAX_S = 5.0, 60.0
REPROCESSABLE = (JobState.PUBLISHED, JobState.WAITING_ONTOLOGY, JobState.WAITING_IDENTITY,
                 JobState.WAITING_REVIEW, JobState.FAILED, JobState.EXHAUSTED)
FENCED = ("renew", "reserve_model_call", "stage", "schedule_retry", "fail", "exhaust")
TOO_LARGE = "preserved payload exceeds the model context"
INVALID_OUTPUT = "invalid model output"
WAITS_ON = {"ontology": JobState.WAITING_ONTOLOGY, "identity": JobState.WAITING_IDENTITY,
            "review": JobState.WAITING_REVIEW}
"""The checker's copy of the bundle's `needs` markers and the waiting state each stages."""


def reading_of(payload: str) -> tuple[JobState, dict[str, Any]]:
    """The staged state and bundle the simulated model's reply gives `payload`: one
    assertion per `subject: value` line, a `needs:` line naming the waiting state (the
    reference model's contract, runtime/adapters/reference_model.py, read afresh here)."""
    assertions: list[dict[str, Any]] = []
    needs: str | None = None
    for line in payload.splitlines():
        subject, sep, value = line.partition(":")
        subject, value = subject.strip(), value.strip()
        if not subject:
            continue
        if subject == "needs" and value in WAITS_ON:
            needs = value
            continue
        assertions.append({"subject": subject, "value": value if sep else None})
    state = WAITS_ON[needs] if needs else JobState.PUBLISHED
    return state, {"assertions": assertions, "needs": needs}


INVARIANTS = (
    ("lease_honoured", "a fenced job transaction (renew, reserve, stage, retry, fail, exhaust) "
     "is refused exactly when its caller does not hold the live lease of the job's current "
     "fence, and the refusal it raises is true of the job it found (stale fence, closed "
     "attempt, another owner, lapsed lease); a holder is refused a call only when the "
     "job's calls are spent, a staging only for another model version",
     "seed 004 'Leases and fences' (staging checks the owner, fence, lease and model version)"),
    ("lease_renewed", "a claim leases the job for a full 90 s from the claim; a renewal by "
     "the holder 20 s or more after the last extends the lease to a full term from now; an "
     "earlier one changes nothing",
     "seed 004 'Leases and fences' (90 s lease, renewed at most every 20 s)"),
    ("payload_fits_context", "a preserved payload beyond the model's context fails without a "
     "model call or a staging, keeping its evidence; a payload that fits is never failed as "
     "too large", "seed 004 'Bounded retries' (a payload can exceed model context and fail "
     "processing without losing the source)"),
    ("service_cancel_recorded", "a cancel records its intent durably before anything else: "
     "once requested it is never cleared, an attempt is CANCELLED only after its request, and "
     "a cancel that returns an unfinished attempt leaves the request for workers to re-drive",
     "seed 000 'Service job attempts' (cancel records intent, asks the exact owner, keeps "
     "reconciling)"),
    ("service_resubmits_on_proof", "proof that the last transmission had no effect (or that "
     "the driver replays the same key) re-submits, unless a cancel was requested: it never "
     "parks the attempt INDETERMINATE (every simulated domain policy admits a re-submit); "
     "with a cancel requested, proof of no effect cancels it",
     "seed 000 'Service job attempts' (a missing job re-submits only on proof)"),
    ("service_resubmit_honoured", "a re-submit is authorised exactly on proof about the "
     "attempt it found: SUBMITTING or INDETERMINATE, no cancel requested, proof of no effect "
     "or same-key replay observed at its current transmission; never on proof of no effect "
     "once a provider job was acknowledged (an effect exists), and a replay proof is not "
     "refused for holding one", "seed 000 'Service job attempts' (re-submit is legal only on "
     "proof of no effect, or on same-key replay that returns the original job)"),
    ("service_settle_honoured", "a settle is accepted exactly when its evidence proves that "
     "outcome for the attempt it found: CANCELLED on never-submitted (prepared), contained or "
     "no-effect evidence; FAILED on a proved rejection or no effect of the last transmission "
     "with no provider job; SUCCEEDED or a provider's FAILED on a lookup of an acknowledged "
     "job", "seed 000 'Service job attempts' (only a driver-proved rejection fails)"),
    ("evidence_digest_sealed", "every preserved evidence carries the sha256 of its own "
     "payload: a record whose declared digest differs is refused before it is received",
     "seed 004 'Durable states' (a receipt preserves evidence; evidence remains intact)"),
    ("model_version_matched", "no model call is spent on a job of another model version: "
     "a worker whose model differs hands the attempt back before reserving a call",
     "seed 004 'Leases and fences' (staging checks the model version; claiming reserves "
     "bounded call work)"),
    ("service_digest_sealed", "every stored attempt carries its idempotency key and, as its "
     "request digest, the digest of its own request, binding and destination: a record "
     "sealed over another request, or without a key, is refused before it is prepared",
     "seed 000 'Service job attempts' (the attempt persists the exact request digest)"),
    ("service_indeterminate_recorded", "an attempt that may have been sent (submitting, "
     "accepted, running, indeterminate) is left INDETERMINATE with the evidence why (a "
     "lookup's absence says truly whether an acknowledged job was lost or the driver "
     "cannot prove absence); a terminal one keeps its truth unchanged; a PREPARED one is "
     "refused (never sent)",
     "seed 000 'Service job attempts' (a timeout, disconnect or malformed acknowledgement "
     "settles INDETERMINATE, never FAILED)"),
    ("service_running_recorded", "a provider's running report moves a sent attempt with "
     "a provider job (accepted, running, indeterminate) to RUNNING at the reported "
     "progress; a repeat of the same progress and a report on a terminal attempt leave the "
     "attempt as it was, unwritten; an attempt without a provider job is refused",
     "seed 000 'Service job attempts' (reconciliation records what the provider reports; "
     "terminal truth is kept)"),
    ("service_open_pass_complete", "a pass over the open attempts (reconcile_open) returns "
     "each attempt at most once and every attempt open from its start to its end, across "
     "all its pages", "seed 000 'Service job attempts' (startup and relays reconcile every "
     "nonterminal attempt)"),
    ("retry_backed_off", "a retry after attempt n is due no later than min(60, 5 x 2^(n-1)) "
     "s after it is scheduled (the default policy's bounded exponential backoff)",
     "seed 004 'Bounded retries' (retryable failures schedule bounded work)"),
    ("retry_waits_full_backoff", "the first schedule_retry call of attempt n asks for "
     "the retry exactly min(60, 5 x 2^(n-1)) s after the failure it reports (its own "
     "time); ledger retries of the call keep that retry time",
     "seed 004 'Bounded retries' (retryable failures schedule bounded work)"),
    ("receipt_idempotent", "a receipt sent again exactly (also decoded afresh) is accepted "
     "and answers the stored job; a job id reused for other work (also the same job "
     "under another model version), or a job of another "
     "workspace than its evidence, is refused (JobConflict)",
     "seed 004 'Durable states' (a receipt preserves evidence and a job in one "
     "transaction)"),
    ("attempt_log_numbered", "a job's attempt log (jobs.attempts) numbers its events 0, 1, "
     "2, ... in the order they were recorded, with no gap or repeat, and each event names "
     "a fence the job has reached (0 to its current fence)",
     "seed 004 'Alpha.2 accounting' (jobs.attempts lists the started, completed, failed and "
     "expired-lease events of a job)"),
    ("interpretation_is_reply", "every staged interpretation holds the model's reply as "
     "its bundle, in the state that reply names (published, or waiting on its `needs`), "
     "and is accepted exactly when published; a well-formed reply never fails its job as "
     "invalid model output",
     "seed 004 'Durable states' (a model output is validated and staged as published or "
     "waiting on a named dependency)"),
    ("malformed_reply_failed", "a model reply whose output is not a bundle (not an object; "
     "assertions not a list of objects; an unknown field; `needs` neither null nor one of "
     "ontology, identity, review) is never staged: the attempt that received it closes "
     "only by failing the job as invalid model output, and an attempt whose worker went "
     "on (its run_once returned) did ask for that failure",
     "seed 004 'Durable states' (a model output is validated before it is staged)"),
    ("reprocess_next_interpretation", "jobs.reprocess is accepted only for a job whose "
     "processing ended, and starts exactly the next interpretation, queued, unleased, with "
     "fresh budgets", "seed 004 'Shutdown and supervision' (jobs.reprocess creates another "
     "interpretation of preserved evidence)"),
)


CLOSED_AS = {"fail": (JobState.FAILED,), "exhaust": (JobState.EXHAUSTED,),
             "schedule_retry": (JobState.RETRY_SCHEDULED, JobState.EXHAUSTED)}


def _repeats_closing(name: str, args: tuple[Any, ...], found: LeasedJob) -> bool:
    """Whether a stage or close of `found`'s settled fence asks for the very outcome that
    closed it (stage: same state and bundle; close: its state and reason, a retry turned
    exhausted carrying the budget's note after the reason)."""
    if name == "stage":
        result = args[4]
        return bool(found.state is result.state and found.bundle == result.bundle)
    states = CLOSED_AS.get(name)
    if states is None or found.state not in states or found.error is None:
        return False
    reason = str(args[-2].reason)
    return found.error == reason or (name == "schedule_retry"
                                     and found.error.startswith(reason + "; "))


def _job(job: LeasedJob | None) -> dict[str, Any] | None:
    if job is None:
        return None
    return {"job": str(job.id), "state": job.state.value, "fence": job.fence,
            "interpretation": job.interpretation, "attempts": job.attempts_used,
            "calls": job.model_calls_reserved, "owner": job.lease_owner}


def _attempt(a: ServiceJobAttempt | None) -> dict[str, Any] | None:
    if a is None:
        return None
    return {"attempt": str(a.id), "key": a.idempotency_key, "state": a.state.value,
            "provider_job": a.provider_job_id, "transmissions": a.transmissions,
            "evidence": [e.kind.value for e in a.evidence]}


class JobChecks:
    """Seed 004: fences, budgets, evidence and usage."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.world = checker.world
        self.jobs: dict[UUID, LeasedJob] = {}
        self.evidence: dict[UUID, EvidenceRecord] = {}
        self.interpretations: dict[UUID, tuple[Interpretation, ...]] = {}
        self.claims: Counter[tuple[UUID, int]] = Counter()
        """Claims (fence increments) seen per (job, interpretation)."""
        self.retry_calls: set[tuple[UUID, int]] = set()
        """(job, fence) attempts whose first schedule_retry call was seen."""
        self.invalid_closes: set[tuple[UUID, int]] = set()
        """(job, fence) attempts whose model call returned a malformed reply and whose
        worker then asked to fail the job as invalid output (accepted or refused)."""

    def fail(self, invariant: str, message: str, **records: Any) -> None:
        self.checker.fail(invariant, message, **records)

    # -- after every committed write ---------------------------------------------

    def after_write(self) -> None:
        store = self.world.jobs
        for evidence_id, record in store.evidence_table.items():
            if evidence_id not in self.evidence \
                    and record.digest != hashlib.sha256(record.payload.encode()).hexdigest():
                self.fail("evidence_digest_sealed", f"evidence {evidence_id} was received with "
                          "a digest that is not its payload's", digest=record.digest)
        for evidence_id, before in self.evidence.items():
            now = store.evidence_table.get(evidence_id)
            if now != before:
                self.fail("evidence_kept", f"evidence {evidence_id} was "
                          f"{'deleted' if now is None else 'rewritten'}")
        for job_id, job in store.job_table.items():
            prev = self.jobs.get(job_id)
            if prev is not job:
                self._job_changed(prev, job)
        self.jobs = dict(store.job_table)
        self.evidence = dict(store.evidence_table)

    def _job_changed(self, prev: LeasedJob | None, job: LeasedJob) -> None:
        store = self.world.jobs
        if job.evidence_id not in store.evidence_table:
            self.fail("evidence_kept", f"job {job.id} has no evidence {job.evidence_id}",
                      job=_job(job))
        self._check_payload_outcome(prev, job)
        if job.attempts_used > job.max_attempts or job.model_calls_reserved > job.max_model_calls:
            self.fail("job_budgets", f"job {job.id} spent {job.attempts_used} attempts and "
                      f"{job.model_calls_reserved} model calls", job=_job(job))
        claimed = job.fence > (prev.fence if prev is not None else 0)
        if claimed and (job.lease_renewed_at != job.updated_at or job.lease_expires_at !=
                        job.updated_at + timedelta(seconds=LEASE_S)):
            self.fail("lease_renewed", f"job {job.id} was claimed at {job.updated_at} with a "
                      f"lease to {job.lease_expires_at}, not a full {LEASE_S:g} s",
                      job=_job(job))
        if prev is not None:
            if job.fence < prev.fence:
                self.fail("fence_never_overwritten", f"job {job.id} fence went back "
                          f"{prev.fence} -> {job.fence}", before=_job(prev), after=_job(job))
            key = (job.id, job.interpretation)
            self.claims[key] += job.fence - prev.fence
            if self.claims[key] > job.max_attempts:
                self.fail("job_budgets", f"job {job.id} interpretation {job.interpretation} "
                          f"was claimed {self.claims[key]} times", job=_job(job))
        elif job.fence:
            self.claims[(job.id, job.interpretation)] += job.fence
        self._check_interpretations(prev, job)

    def _check_interpretations(self, prev: LeasedJob | None, job: LeasedJob) -> None:
        now = tuple(self.world.jobs.interpretation_table.get(job.id, ()))
        before = self.interpretations.get(job.id, ())
        if now[: len(before)] != before:
            self.fail("fence_never_overwritten", f"job {job.id}: a staged interpretation was "
                      "retracted or rewritten", job=_job(job))
        numbers = [i.number for i in before]
        last_fence = before[-1].fence if before else -1
        for new in now[len(before):]:
            if new.fence != job.fence:
                self.fail("fence_never_overwritten", f"job {job.id}: interpretation {new.number} "
                          f"staged from fence {new.fence} while the job is at fence {job.fence}",
                          job=_job(job), before=_job(prev))
            if new.number in numbers or new.fence <= last_fence:
                self.fail("fence_never_overwritten", f"job {job.id}: interpretation {new.number} "
                          f"(fence {new.fence}) overwrote an earlier staging", job=_job(job))
            numbers.append(new.number)
            last_fence = new.fence
            shape = self._malformed_at(job.id, new.fence)
            if shape is not None:
                self.fail("malformed_reply_failed", f"job {job.id}: interpretation "
                          f"{new.number} was staged ({new.state.value}) from fence {new.fence}, "
                          f"whose model call returned a malformed output ({shape})",
                          job=_job(job))
            self._check_reading(job, new)
        if prev is not None and job.bundle != prev.bundle and job.bundle is not None \
                and len(now) == len(before):
            self.fail("fence_never_overwritten", f"job {job.id}: bundle changed without a new "
                      "staged interpretation", job=_job(job))
        if job.state in STAGED_STATES and (not now or now[-1].bundle != job.bundle):
            self.fail("fence_never_overwritten", f"job {job.id} is {job.state.value} with a "
                      "bundle that is not its latest interpretation", job=_job(job))
        self.interpretations[job.id] = now

    def _check_reading(self, job: LeasedJob, new: Interpretation) -> None:
        """interpretation_is_reply: a staging holds what the model answered its evidence."""
        evidence = self.world.jobs.evidence_table.get(job.evidence_id)
        if evidence is None:
            return  # evidence_kept judges the job
        state, bundle = reading_of(evidence.payload)
        if (new.state, new.bundle, new.accepted) != (state, bundle,
                                                     state is JobState.PUBLISHED):
            self.fail("interpretation_is_reply", f"job {job.id}: interpretation {new.number} "
                      f"is {new.state.value} (accepted {new.accepted}) with "
                      f"{str(new.bundle)[:160]}; the model's reply gives {state.value} with "
                      f"{str(bundle)[:160]}", job=_job(job))

    def _call_of(self, job_id: UUID, fence: int) -> ModelCall | None:
        """The model call the attempt at `fence` reserved (its STARTED event), as the
        provider's books hold it; None: that attempt made no call."""
        for e in self.world.jobs.event_log.get(job_id, ()):
            if e.kind is EventKind.STARTED and e.call is not None and e.fence == fence:
                return self.world.model.calls.get((job_id, e.interpretation, e.call))
        return None

    def _malformed_at(self, job_id: UUID, fence: int) -> str | None:
        """The malformed shape of the reply the attempt at `fence` received (None: it
        received none, or a well-formed one)."""
        call = self._call_of(job_id, fence)
        if call is None or call.outcome != "replied":
            return None
        return call.malformed

    def _judge_malformed(self, name: str, args: tuple[Any, ...], found: LeasedJob,
                         where: dict[str, Any]) -> None:
        """malformed_reply_failed: the holder of a malformed reply only fails its job as
        invalid output (a staging or any other closing of that attempt is a violation)."""
        fence, owner = int(args[1]), str(args[2])
        call = self._call_of(found.id, fence)
        if call is None or call.outcome != "replied" or call.malformed is None \
                or call.worker != owner:
            return
        reason = "" if name == "stage" else str(args[-2].reason)
        if name == "fail" and reason.startswith(INVALID_OUTPUT):
            self.invalid_closes.add((found.id, fence))
            return
        self.fail("malformed_reply_failed", f"jobs.{name} of job {found.id} fence {fence} by "
                  f"{owner} after its model call returned a malformed output "
                  f"({call.malformed}): {reason[:120] or 'the output was staged'}; the "
                  "attempt must fail the job as invalid model output", **where)

    def _oversized(self, job: LeasedJob) -> bool | None:
        """Whether the job's preserved payload exceeds the model's context (None: no
        evidence, which evidence_kept judges)."""
        evidence = self.world.jobs.evidence_table.get(job.evidence_id)
        if evidence is None:
            return None
        return len(evidence.payload) > self.world.model.context_limit

    def _check_payload_outcome(self, prev: LeasedJob | None, job: LeasedJob) -> None:
        oversized = self._oversized(job)
        if oversized is None:
            return
        if oversized and job.state in STAGED_STATES:
            self.fail("payload_fits_context", f"job {job.id} staged a payload beyond the "
                      f"model's context of {self.world.model.context_limit}", job=_job(job))
        entered = prev is None or prev.state is not job.state or prev.error != job.error
        if entered and (job.error or "").startswith(INVALID_OUTPUT) \
                and self._malformed_at(job.id, job.fence) is None:
            self.fail("interpretation_is_reply", f"job {job.id} failed a well-formed model "
                      f"reply as {(job.error or '')[:160]!r}", job=_job(job))
        if entered and job.state is JobState.FAILED and not oversized \
                and (job.error or "").startswith(TOO_LARGE):
            self.fail("payload_fits_context", f"job {job.id} failed as too large, but its "
                      f"payload fits the model's context of {self.world.model.context_limit}",
                      job=_job(job), error=job.error)

    def on_model_call(self, key: CallKey, record: ModelCall, worker: str,
                      version: str | None = None) -> None:
        job_id, interpretation, call = key
        calls = self.world.model.calls
        job = self.world.jobs.job_table.get(job_id)
        if job is None:
            self.fail("job_budgets", f"model call for unknown job {job_id}")
            return
        if version is not None and version != job.model_version:
            self.fail("model_version_matched", f"job {job_id} of model {job.model_version} "
                      f"spent call {call} on model {version}", job=_job(job), worker=worker)
        if self._oversized(job):
            self.fail("payload_fits_context", f"job {job_id}: a payload beyond the model's "
                      f"context of {self.world.model.context_limit} went to the model",
                      job=_job(job), worker=worker)
        if key in calls:
            self.fail("job_budgets", f"job {job_id} reservation {call} was used for two model "
                      "calls", job=_job(job))
        made = sum(1 for (j, i, _) in calls if (j, i) == (job_id, interpretation)) + 1
        if made > job.max_model_calls or call > job.max_model_calls:
            self.fail("job_budgets", f"job {job_id} interpretation {interpretation} made "
                      f"{made} model calls (limit {job.max_model_calls})", job=_job(job))
        events = self.world.jobs.event_log.get(job_id, [])
        reserved = any(e.kind is EventKind.STARTED and e.call == call
                       and e.interpretation == interpretation for e in events)
        if not reserved or job.lease_owner != worker or job.interpretation != interpretation:
            self.fail("job_budgets", f"job {job_id} model call {call} went out without a "
                      "reservation under its live lease", job=_job(job), worker=worker)

    # -- each fenced decision, judged from the job its transaction found -------------

    def on_decision(self, name: str, args: tuple[Any, ...], found: LeasedJob | None,
                    result: Any, error: BaseException | None) -> None:
        """Re-judge one job transaction (sim.leased.SimJobStore: `found` is the job its
        decision read, `result` what it answered, `error` what it raised)."""
        if found is None:
            return
        if error is not None and not isinstance(error, JobError):
            self.fail("lease_honoured", f"jobs.{name} of job {found.id} raised "
                      f"{type(error).__name__}: {error}", job=_job(found))
        now: datetime = args[-1]
        if name == "reprocess":
            self._judge_reprocess(found, now, result, error)
            return
        fence, owner = int(args[1]), str(args[2])
        where = {"job": _job(found), "fence": fence, "owner": owner, "op": name}
        if name in ("stage", "fail", "schedule_retry", "exhaust"):
            self._judge_malformed(name, args, found, where)
        live = found.lease_expires_at is not None and now < found.lease_expires_at
        reasons = {
            StaleFence: fence != found.fence,
            AttemptClosed: found.settled_fence == fence,
            NotLeaseOwner: found.lease_owner != owner,
            LeaseExpired: not live,
        }
        refused = isinstance(error, (StaleFence, AttemptClosed, NotLeaseOwner, LeaseExpired))
        if refused:
            if not reasons[type(error)]:
                self.fail("lease_honoured", f"jobs.{name} of job {found.id} fence {fence} by "
                          f"{owner} was refused as {type(error).__name__}, which the job it "
                          "found does not bear out", **where)
            if isinstance(error, AttemptClosed) and fence == found.fence \
                    and _repeats_closing(name, args, found):
                self.fail("lease_honoured", f"jobs.{name} of job {found.id} repeats the very "
                          f"closing of fence {fence} (a retry after an ambiguous commit) and "
                          "was refused as AttemptClosed", **where)
            return
        if fence != found.fence or (found.settled_fence != fence and (
                found.lease_owner != owner or not live)):
            self.fail("lease_honoured", f"jobs.{name} of job {found.id} fence {fence} by "
                      f"{owner} was accepted without the live lease of the current fence",
                      **where)
        if found.settled_fence == fence:
            # Only a repeat of the very closing (after an ambiguous commit) passes, unchanged.
            if error is None and (name in ("renew", "reserve_model_call") or result != found):
                self.fail("lease_honoured", f"jobs.{name} of job {found.id} was accepted on "
                          f"the closed attempt of fence {fence}", **where)
            return
        spent = found.model_calls_reserved >= found.max_model_calls
        if isinstance(error, CallBudgetExhausted) != (name == "reserve_model_call" and spent):
            answer = type(error).__name__ if error else "accepted"
            self.fail("lease_honoured", f"jobs.{name} of job {found.id}: "
                      f"{found.model_calls_reserved} of {found.max_model_calls} calls "
                      f"reserved, answered {answer}", **where)
        if isinstance(error, ModelVersionMismatch) and not (
                name == "stage" and args[3] != found.model_version):
            self.fail("lease_honoured", f"jobs.{name} of job {found.id} refused its own model "
                      "version", **where)
        if name == "renew" and error is None:
            self._judge_renewal(found, now, result, where)
        if name == "schedule_retry" and found.lease_owner == owner \
                and found.settled_fence != fence:
            # The holder's own attempt, still open: its attempt count is the job's.
            n = found.attempts_used
            backoff = timedelta(seconds=min(RETRY_MAX_S, RETRY_BASE_S * 2 ** max(0, n - 1)))
            if args[3] - now > backoff:
                self.fail("retry_backed_off", f"attempt {n} of job {found.id} scheduled its "
                          f"retry {args[3] - now} ahead, beyond the {backoff} backoff",
                          **where)

    def on_retry_call(self, args: tuple[Any, ...], current: LeasedJob | None) -> None:
        """The first `schedule_retry` call of an attempt, as the worker made it.

        The worker reads its clock once, at the failure, and asks for the retry at that
        time plus the backoff; the first call carries that very time (ledger retries,
        made later, reuse the retry time and so eat into the wait). So the first call's
        retry time is exactly its own time plus the backoff: a lower bound as well as
        the upper one `retry_backed_off` judges at every decision."""
        job_id, fence, owner, retry_at, _failure, now = args
        if (job_id, fence) in self.retry_calls:
            return
        self.retry_calls.add((job_id, fence))
        if current is None or current.fence != fence or current.lease_owner != owner \
                or current.settled_fence == fence:
            return  # not the holder's open attempt: refused, judged by lease_honoured
        n = current.attempts_used
        backoff = timedelta(seconds=min(RETRY_MAX_S, RETRY_BASE_S * 2 ** max(0, n - 1)))
        if retry_at - now != backoff:
            self.fail("retry_waits_full_backoff", f"attempt {n} of job {job_id} failed at "
                      f"{now} and asked for its retry {retry_at - now} later, not after the "
                      f"{backoff} backoff", job=_job(current), fence=fence, owner=owner)

    def _judge_renewal(self, found: LeasedJob, now: datetime, result: Any,
                       where: dict[str, Any]) -> None:
        renewed = found.lease_renewed_at
        due = renewed is None or now - renewed >= timedelta(seconds=RENEW_EVERY_S)
        expires = now + timedelta(seconds=found.lease_s) if due else found.lease_expires_at
        stamped = now if due else renewed
        if not isinstance(result, LeasedJob) or (result.lease_expires_at,
                                                 result.lease_renewed_at) != (expires, stamped):
            got = result.lease_expires_at if isinstance(result, LeasedJob) else result
            self.fail("lease_renewed", f"a {'due' if due else 'early'} renewal of job "
                      f"{found.id} left its lease expiring at {got}, not {expires}", **where)

    def _judge_reprocess(self, found: LeasedJob, now: datetime, result: Any,
                         error: BaseException | None) -> None:
        allowed = found.state in REPROCESSABLE
        if isinstance(error, NotReprocessable):
            if allowed:
                self.fail("reprocess_next_interpretation", f"job {found.id} "
                          f"({found.state.value}) was refused reprocessing", job=_job(found))
            return
        if error is not None:
            return
        if not allowed:
            self.fail("reprocess_next_interpretation", f"job {found.id} was reprocessed while "
                      f"{found.state.value}", job=_job(found))
        fresh = (found.interpretation + 1, JobState.QUEUED, 0, 0, None, None)
        got = (result.interpretation, result.state, result.attempts_used,
               result.model_calls_reserved, result.lease_owner, result.lease_expires_at)
        if got != fresh:
            self.fail("reprocess_next_interpretation", f"reprocessing job {found.id} at "
                      f"interpretation {found.interpretation} left {got}, not {fresh}",
                      job=_job(result))

    # -- once healed ---------------------------------------------------------------

    def final(self, check_liveness: bool) -> None:
        self.after_write()
        self._check_attempt_log()
        self._check_malformed_failed()
        self._check_usage()
        self._check_receipts()
        if check_liveness:
            for job in self.world.jobs.job_table.values():
                if not (job.state.terminal or job.state.waiting):
                    self.fail("job_liveness", f"job {job.id} is still {job.state.value} after "
                              "heal", job=_job(job))

    def _check_attempt_log(self) -> None:
        """Each job's events are numbered by their place in its log (an expired lease and
        the exhaustion a claim records after it are two events), and no event names a
        fence no claim of the job ever reached (a negative one included)."""
        store = self.world.jobs
        for job_id, events in store.event_log.items():
            job = store.job_table.get(job_id)
            numbers = [e.index for e in events]
            if numbers != list(range(len(events))):
                self.fail("attempt_log_numbered", f"job {job_id}: its attempt events are "
                          f"numbered {numbers}, not 0 .. {len(events) - 1}", job=_job(job))
            top = job.fence if job is not None else 0
            for e in events:
                if not 0 <= e.fence <= top:
                    self.fail("attempt_log_numbered", f"job {job_id}: attempt event {e.index} "
                              f"({e.kind.value}) names fence {e.fence}, which the job (at "
                              f"fence {top}) never reached", job=_job(job))

    def _check_usage(self) -> None:
        store, calls = self.world.jobs, self.world.model.calls
        for job_id, events in store.event_log.items():
            started = {e.fence: (e.interpretation, e.call) for e in events
                       if e.kind is EventKind.STARTED and e.call is not None}
            for e in events:
                if e.kind not in (EventKind.COMPLETED, EventKind.FAILED) or e.usage is None:
                    continue
                call = started.get(e.fence)
                record = calls.get((job_id, *call)) if call is not None else None
                if call is not None and e.interpretation != call[0]:
                    self.fail("usage_never_fabricated", f"job {job_id} fence {e.fence} records "
                              f"usage under interpretation {e.interpretation}, but its call "
                              f"was made for interpretation {call[0]}", event=e.index)
                if record is None or record.returned != e.usage:
                    known = None if record is None else record.returned
                    self.fail("usage_never_fabricated", f"job {job_id} fence {e.fence} records "
                              f"usage {e.usage.model_dump()} the model never returned "
                              f"(returned: {known})", event=e.index)
        # Usage a live worker received is kept, even when its result was fenced out.
        closed = self._closed_attempts()
        for job_id, events in store.event_log.items():
            for e in events:
                if e.kind is not EventKind.STARTED or e.call is None:
                    continue
                record = calls.get((job_id, e.interpretation, e.call))
                if record is None or record.returned is None or (job_id, e.fence) not in closed:
                    continue
                kept = any(o.fence == e.fence and o.usage == record.returned for o in events
                           if o.kind in (EventKind.COMPLETED, EventKind.FAILED))
                if not kept:
                    self.fail("usage_never_fabricated", f"job {job_id} fence {e.fence}: usage "
                              f"{record.returned.model_dump()} reached a live worker but is "
                              "not in the attempt log")

    def _check_malformed_failed(self) -> None:
        """An attempt that received a malformed reply and whose worker went on (its
        run_once returned: it did not die meanwhile) asked to fail the job as invalid
        output, even one whose lease had lapsed by then (that failure is refused)."""
        closed = self._closed_attempts()
        for job_id, events in self.world.jobs.event_log.items():
            for e in events:
                if e.kind is not EventKind.STARTED or e.call is None \
                        or (job_id, e.fence) not in closed \
                        or (job_id, e.fence) in self.invalid_closes:
                    continue
                shape = self._malformed_at(job_id, e.fence)
                if shape is not None:
                    self.fail("malformed_reply_failed", f"job {job_id} fence {e.fence}: its "
                              f"model call returned a malformed output ({shape}) and the "
                              "attempt ended without failing the job as invalid output",
                              job=_job(self.world.jobs.job_table.get(job_id)))

    def _closed_attempts(self) -> set[tuple[UUID, int]]:
        """(job, fence) attempts whose run_once returned normally (from the trace)."""
        closed: set[tuple[UUID, int]] = set()
        for rec in self.world.trace.records("jobs.step"):
            if rec["event"] == "jobs.step" and rec["data"].get("returned") \
                    and rec["data"].get("claimed"):
                job, fence = rec["data"]["claimed"]
                closed.add((UUID(job), int(fence)))
        return closed

    def _check_receipts(self) -> None:
        store = self.world.jobs
        for rec in self.world.trace.records("evidence.receipt"):
            if rec["event"] != "evidence.receipt" or rec["data"]["outcome"] == "LedgerUnavailable":
                continue
            data = rec["data"]
            if data["kind"] == "again" and (data["outcome"], data["stored"]) != \
                    ("received", data["job"]):
                self.fail("receipt_idempotent", f"a repeated receipt of job {data['job']} "
                          f"answered {data['outcome']}", receipt=data)
            refused = ("reused", "misfiled", "version")  # other work under a taken id
            if data["kind"] in refused and data["outcome"] != "JobConflict":
                self.fail("receipt_idempotent", f"a {data['kind']} receipt of job "
                          f"{data['job']} for evidence {data['evidence']} answered "
                          f"{data['outcome']}", receipt=data)
        for rec in self.world.trace.records("evidence.received"):
            if rec["event"] != "evidence.received":
                continue
            data = rec["data"]
            evidence = store.evidence_table.get(UUID(data["evidence"]))
            job = store.job_table.get(UUID(data["job"]))
            if evidence is None or evidence.digest != data["digest"]:
                self.fail("evidence_kept", f"received evidence {data['evidence']} is gone or "
                          "changed")
            if job is None or job.evidence_id != UUID(data["evidence"]):
                self.fail("evidence_kept", f"the job {data['job']} of received evidence "
                          f"{data['evidence']} is gone")


def _settle_proved(a: ServiceJobAttempt, outcome: ServiceOutcome, evidence: Evidence) -> bool:
    """The checker's own reading of when evidence proves a terminal outcome (seed 000
    "Service job attempts") for a nonterminal attempt."""
    S, K = ServiceState, EvidenceKind
    if evidence.kind in FAILED_PROOFS and evidence.transmission != a.transmissions:
        return False  # it proves nothing about a later transmission
    if outcome.state is S.CANCELLED:
        if a.state is S.PREPARED:
            return evidence.kind is K.NEVER_SUBMITTED
        return evidence.kind in (K.CANCEL_CONTAINED, K.NO_EFFECT)
    if a.state is S.PREPARED:
        return False
    if outcome.state is S.FAILED and evidence.kind in FAILED_PROOFS:
        return a.state in (S.SUBMITTING, S.INDETERMINATE) and a.provider_job_id is None
    return (a.state in (S.ACCEPTED, S.RUNNING, S.INDETERMINATE)
            and a.provider_job_id is not None and evidence.kind is K.LOOKUP_FOUND)


def _resubmit_proved(a: ServiceJobAttempt, proof: Evidence) -> bool:
    """The checker's own reading of when a proof authorises another transmission of `a`
    (seed 000 "Service job attempts"): an acknowledged provider job is an effect, so
    proof of no effect says nothing once one is known; same-key replay returns it."""
    S, K = ServiceState, EvidenceKind
    return (a.state in (S.SUBMITTING, S.INDETERMINATE) and a.cancel_requested_at is None
            and proof.kind in (K.NO_EFFECT, K.SAME_KEY_REPLAY)
            and proof.transmission == a.transmissions
            and not (proof.kind is K.NO_EFFECT and a.provider_job_id is not None))


class ServiceChecks:
    """Seed 000 "Service job attempts": proof before failure, one effect per key."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.world = checker.world
        self.attempts: dict[UUID, ServiceJobAttempt] = {}
        self._proof_counts: dict[UUID, tuple[tuple[Evidence, ...], int]] = {}
        self.digests: dict[str, str] = {}
        """The digest each key first reached the provider with."""

    def fail(self, invariant: str, message: str, **records: Any) -> None:
        self.checker.fail(invariant, message, **records)

    def after_write(self) -> None:
        for attempt_id, attempt in self.world.services.attempt_table.items():
            prev = self.attempts.get(attempt_id)
            if prev is not attempt:
                self._attempt_changed(prev, attempt)
        self.attempts = dict(self.world.services.attempt_table)

    def _proofs(self, a: ServiceJobAttempt) -> int:
        """Resubmit proofs in `a.evidence`, counted on the part not seen before.

        Evidence only grows by appending; when the evidence last counted for
        this attempt is a prefix (compared by identity, in C), only the new
        tail is counted, otherwise all of it again.
        """
        seen, n = self._proof_counts.get(a.id, ((), 0))
        evidence = a.evidence
        if len(evidence) < len(seen) or evidence[: len(seen)] != seen:
            seen, n = (), 0
        n += sum(1 for e in evidence[len(seen):] if e.kind in RESUBMIT_PROOFS)
        self._proof_counts[a.id] = (evidence, n)
        return n

    def _attempt_changed(self, prev: ServiceJobAttempt | None, a: ServiceJobAttempt) -> None:
        provider = self.world.provider
        # The runtime's own digest function, read at call time: this check is about the
        # record's seal, not about the digest's format (service_key_payload judges that).
        if prev is None and not a.idempotency_key:
            self.fail("service_digest_sealed", f"attempt {a.id} was prepared without an "
                      "idempotency key", attempt=_attempt(a))
        if prev is None and a.request_digest != service_models.request_digest(
                a.request, a.binding, a.envelope.destination):
            self.fail("service_digest_sealed", f"attempt {a.id} was prepared with a digest "
                      "that is not its request's", attempt=_attempt(a))
        if prev is not None:
            if prev.request_digest != a.request_digest or prev.idempotency_key != \
                    a.idempotency_key:
                self.fail("service_key_payload", f"attempt {a.id} changed its key or payload",
                          before=_attempt(prev), after=_attempt(a))
            if prev.state.terminal and (prev.state, prev.result) != (a.state, a.result):
                self.fail("service_no_fabricated_failure", f"terminal attempt {a.id} changed "
                          f"{prev.state.value} -> {a.state.value}", after=_attempt(a))
        if prev is not None and prev.cancel_requested_at is not None \
                and a.cancel_requested_at != prev.cancel_requested_at:
            self.fail("service_cancel_recorded", f"attempt {a.id} lost its cancel request",
                      before=_attempt(prev), after=_attempt(a))
        if a.state is ServiceState.INDETERMINATE and a.cancel_requested_at is not None \
                and a.evidence and (prev is None or len(a.evidence) > len(prev.evidence)) \
                and a.evidence[-1].kind is EvidenceKind.NO_EFFECT \
                and a.evidence[-1].transmission == a.transmissions \
                and a.provider_job_id is None:
            self.fail("service_resubmits_on_proof", f"attempt {a.id} had its cancel requested "
                      f"and proof of no effect for transmission {a.transmissions}, and was left "
                      "INDETERMINATE instead of CANCELLED", attempt=_attempt(a))
        if a.state is ServiceState.INDETERMINATE and a.cancel_requested_at is None \
                and a.evidence and (prev is None or len(a.evidence) > len(prev.evidence)) \
                and a.evidence[-1].kind in (EvidenceKind.NO_EFFECT, EvidenceKind.SAME_KEY_REPLAY) \
                and a.evidence[-1].transmission == a.transmissions:
            self.fail("service_resubmits_on_proof", f"attempt {a.id} was left INDETERMINATE on "
                      f"{a.evidence[-1].kind.value} proof for transmission {a.transmissions} "
                      "with no cancel requested", attempt=_attempt(a))
        proofs = self._proofs(a)
        if a.transmissions > 1 + proofs:
            self.fail("service_single_effect", f"attempt {a.id} transmitted {a.transmissions} "
                      f"times on {proofs} proofs", attempt=_attempt(a))
        entered = prev is None or prev.state is not a.state
        if not entered or not a.state.terminal:
            return
        job = provider.job_of(a.idempotency_key, a.provider_job_id)
        last = a.evidence[-1].kind if a.evidence else None
        if a.state is ServiceState.FAILED and a.transmissions:
            proved = (
                (last in FAILED_PROOFS and not provider.by_key.get(a.idempotency_key))
                or (last is EvidenceKind.LOOKUP_FOUND and job is not None
                    and job.status is ProviderStatus.FAILED)
            )
            if not proved:
                self.fail("service_no_fabricated_failure", f"attempt {a.id} FAILED on "
                          f"{last.value if last else 'no'} evidence while the provider job is "
                          f"{job.status.value if job else 'absent'}", attempt=_attempt(a))
        if a.state is ServiceState.SUCCEEDED and (
            job is None or job.status is not ProviderStatus.SUCCEEDED
        ):
            self.fail("service_no_fabricated_failure", f"attempt {a.id} SUCCEEDED while the "
                      f"provider job is {job.status.value if job else 'absent'}",
                      attempt=_attempt(a))
        if a.state is ServiceState.CANCELLED and (
                a.cancel_requested_at is None
                or EvidenceKind.CANCEL_REQUESTED not in [e.kind for e in a.evidence]):
            self.fail("service_cancel_recorded", f"attempt {a.id} CANCELLED without a recorded "
                      "cancel request", attempt=_attempt(a))
        if a.state is ServiceState.CANCELLED:
            live = provider.live_jobs(a.idempotency_key)
            if live:
                self.fail("service_cancel_contained", f"attempt {a.id} CANCELLED while provider "
                          f"job {live[0].job_id} is {live[0].status.value}", attempt=_attempt(a))

    def on_settle(self, found: ServiceJobAttempt | None, outcome: ServiceOutcome,
                  evidence: Evidence, error: BaseException | None) -> None:
        """Re-judge one settle from the attempt its transaction found."""
        if found is None or found.state.terminal:
            return
        allowed = _settle_proved(found, outcome, evidence)
        if allowed == (error is None):
            return
        self.fail("service_settle_honoured", f"settling attempt {found.id} "
                  f"({found.state.value}) {outcome.state.value} on {evidence.kind.value} "
                  f"evidence was {'refused' if error else 'accepted'}",
                  attempt=_attempt(found), error=type(error).__name__ if error else None)

    def on_resubmit(self, found: ServiceJobAttempt | None, proof: Evidence,
                    result: ServiceJobAttempt | None, error: BaseException | None) -> None:
        """Re-judge one begin_resubmit from the attempt its transaction found: authorised
        exactly when the proof allows another transmission, and then one more of them."""
        if found is None:
            return
        allowed = _resubmit_proved(found, proof)
        if allowed:
            ok = (error is None and result is not None
                  and result.state is ServiceState.SUBMITTING
                  and result.transmissions == found.transmissions + 1)
        else:
            ok = error is not None
        if ok:
            return
        job = f", provider job {found.provider_job_id}" if found.provider_job_id else ""
        self.fail("service_resubmit_honoured", f"a re-submit of attempt {found.id} "
                  f"({found.state.value}, transmission {found.transmissions}{job}) on "
                  f"{proof.kind.value} proof of transmission {proof.transmission} was "
                  f"{'refused' if error else 'authorised'}", attempt=_attempt(found),
                  error=type(error).__name__ if error else None)

    def on_indeterminate(self, found: ServiceJobAttempt | None, evidence: Evidence,
                         result: ServiceJobAttempt | None, error: BaseException | None) -> None:
        """Re-judge one mark_indeterminate from the attempt its transaction found."""
        if found is None:
            return
        S = ServiceState
        if found.state.terminal:
            ok = error is None and result == found
        elif found.state is S.PREPARED:
            ok = error is not None
        else:
            ok = (error is None and result is not None and result.state is S.INDETERMINATE
                  and result.evidence[-1:] == (evidence,))
        if not ok:
            answer = type(error).__name__ if error else (result.state.value if result else None)
            self.fail("service_indeterminate_recorded", f"marking attempt {found.id} "
                      f"({found.state.value}) indeterminate on {evidence.kind.value} answered "
                      f"{answer}", attempt=_attempt(found))
        if evidence.kind is EvidenceKind.LOOKUP_ABSENT:
            self._judge_absence_reason(found, evidence)

    def _judge_absence_reason(self, found: ServiceJobAttempt, evidence: Evidence) -> None:
        """A lookup's absence says truly why it proves nothing: an acknowledged job lost
        only of an attempt holding a provider job identity (never cleared once recorded,
        so the one the runtime read held it too), and absence as no proof only under a
        provider that neither proves absence nor replays by key (fixed per seed)."""
        provider = self.world.provider
        if evidence.detail == ACKNOWLEDGED_JOB_GONE:
            truthful = found.provider_job_id is not None
        elif evidence.detail == ABSENCE_NOT_PROOF:
            truthful = not (provider.lookup_proves_absence or provider.replays_same_key)
        else:
            truthful = False
        if not truthful:
            self.fail("service_indeterminate_recorded", f"attempt {found.id} (provider job "
                      f"{found.provider_job_id}) was left indeterminate on a lookup's absence "
                      f"saying {evidence.detail!r} under the {provider.profile!r} provider",
                      attempt=_attempt(found))

    def on_running(self, found: ServiceJobAttempt | None, cursor: str | None,
                   result: ServiceJobAttempt | None, error: BaseException | None) -> None:
        """Re-judge one mark_running from the attempt its transaction found: a report
        that changes nothing (a terminal attempt, or one already RUNNING at that progress)
        answers the attempt as it was, unwritten; a sent attempt with a provider job
        becomes RUNNING at the reported progress; any other is refused."""
        if found is None:
            return
        S = ServiceState
        if found.state.terminal or (found.state is S.RUNNING
                                    and found.progress_cursor == cursor):
            ok, want = error is None and result == found, "unchanged"
        elif found.state in (S.ACCEPTED, S.RUNNING, S.INDETERMINATE) \
                and found.provider_job_id:
            ok = (error is None and result is not None and result.state is S.RUNNING
                  and result.progress_cursor == cursor)
            want = f"running at {cursor}"
        else:
            ok, want = error is not None, "refused"
        if not ok:
            answer = type(error).__name__ if error else (
                f"{result.state.value} v{result.version} at {result.progress_cursor}"
                if result else None)
            self.fail("service_running_recorded", f"a running report at {cursor} on attempt "
                      f"{found.id} ({found.state.value} v{found.version} at "
                      f"{found.progress_cursor}) answered {answer}, not {want}",
                      attempt=_attempt(found))

    def on_open_pass(self, process: str, open_before: Collection[UUID],
                     visited: Sequence[UUID]) -> None:
        """An attempt open as the pass began and still open now was open whenever the
        pass could have read it (terminal is final): its page must have held it."""
        table = self.world.services.attempt_table
        twice = sorted({str(i) for i in visited if visited.count(i) > 1})
        if twice:
            self.fail("service_open_pass_complete", f"the open pass of {process} returned "
                      f"{', '.join(twice)} more than once", process=process)
        missed = sorted(str(i) for i in open_before
                        if i in table and not table[i].state.terminal and i not in visited)
        if missed:
            self.fail("service_open_pass_complete", f"the open pass of {process} skipped open "
                      f"attempts {', '.join(missed)}", process=process, open=len(open_before),
                      visited=len(visited))

    def on_provider_transmission(self, key: str, digest: str) -> None:
        first = self.digests.setdefault(key, digest)
        if first != digest:
            self.fail("service_key_payload", f"key {key} reached the provider with a changed "
                      "payload", key=key)

    def on_provider_effect(self, key: str) -> None:
        started = self.world.provider.by_key.get(key, [])
        store = self.world.services
        attempt_id = store.key_index.get(key)
        a = store.attempt_table.get(attempt_id) if attempt_id is not None else None
        if a is not None and a.state is ServiceState.CANCELLED:
            # CANCELLED claimed containment: no effect of the key may start after it.
            self.fail("service_cancel_contained", f"key {key} started provider job "
                      f"{started[-1]} after attempt {a.id} settled CANCELLED",
                      attempt=_attempt(a))
        if len(started) > 1:
            self.fail("service_single_effect", f"key {key} started {len(started)} provider "
                      f"jobs: {', '.join(started)}", key=key)

    def final(self, check_liveness: bool) -> None:
        self.after_write()
        self._check_prepares()
        self._check_cancels()
        if not check_liveness:
            return
        provider = self.world.provider
        for a in self.world.services.attempt_table.values():
            if a.state.terminal or self._prepared_but_never_parked(a):
                continue
            if a.state is not ServiceState.INDETERMINATE:
                self.fail("service_liveness", f"attempt {a.id} is still {a.state.value} after "
                          "heal", attempt=_attempt(a))
            job = provider.job_of(a.idempotency_key, a.provider_job_id)
            recorded = any(e.kind in CONTAINMENT and e.transmission == a.transmissions
                           for e in a.evidence)
            if job is not None or not recorded:
                self.fail("service_liveness", f"attempt {a.id} is INDETERMINATE after heal "
                          f"{'with provider job ' + job.job_id if job else 'without evidence'}",
                          attempt=_attempt(a))

    def _check_cancels(self) -> None:
        """An operator's cancel that returned an unfinished attempt left its request."""
        open_states = {st.value for st in ServiceState if not st.terminal}
        for rec in self.world.trace.records("service.cancel"):
            data = rec["data"]
            if rec["event"] != "service.cancel" or data.get("outcome") not in open_states:
                continue
            a = self.world.services.attempt_table.get(UUID(str(data["attempt"])))
            if a is not None and a.cancel_requested_at is None:
                self.fail("service_cancel_recorded", f"a cancel of attempt {a.id} returned "
                          f"{data['outcome']} without recording the request",
                          attempt=_attempt(a))

    def _prepared_but_never_parked(self, a: ServiceJobAttempt) -> bool:
        """A PREPARED attempt of a hop that could not park (its Run moved on): it
        proves nothing was sent, and nothing ever sends it (runtime.stasis.service)."""
        if a.state is not ServiceState.PREPARED or a.owner.run_id is None:
            return False
        run = self.world.ledger.run_table.get(a.owner.run_id)
        return run is not None and run.service_attempt_id != a.id

    def _check_prepares(self) -> None:
        """A changed payload for a key is refused; the same payload never is."""
        store = self.world.services
        for rec in self.world.trace.records("service.corrupt"):
            # The requester's record edited under its sealed digest (or stripped of its
            # key) must not validate: a validator that reseals it over the edited request
            # makes the forgery consistent, so no later prepare could tell (M9).
            if rec["event"] == "service.corrupt" and rec["data"]["outcome"] == "accepted":
                self.fail("service_digest_sealed", f"a record of key {rec['data']['key']} "
                          "whose request no longer matches its digest, or without its key, "
                          "validated", key=rec["data"]["key"])
        for rec in self.world.trace.records("service.prepare"):
            if rec["event"] != "service.prepare":
                continue
            data = rec["data"]
            if data["outcome"] == "IllegalTransition":  # the requester sends only fresh records
                self.fail("service_key_payload", f"a fresh attempt for key {data['key']} was "
                          "refused as not fresh", key=data["key"])
            attempt_id = store.key_index.get(data["key"])
            stored = store.attempt_table.get(attempt_id) if attempt_id else None
            if stored is None:
                continue
            same = stored.request_digest == data["digest"]
            if data["outcome"] == "prepared" and not same:
                self.fail("service_key_payload", f"key {data['key']} accepted a changed payload",
                          key=data["key"])
            if data["outcome"] == "ServicePayloadConflict" and same:
                self.fail("service_key_payload", f"key {data['key']} refused its own payload",
                          key=data["key"])
            # Judged by content too (dicts compare regardless of key order): a digest that
            # depends on the serialisation order would refuse the same request.
            if data["outcome"] == "ServicePayloadConflict" and data.get("request") is not None \
                    and data["request"] == stored.request:
                self.fail("service_key_payload", f"key {data['key']} refused its own request "
                          "sent in another key order", key=data["key"])
