"""An AgentRuntime backed by leased jobs (issue 8 item 3).

Seed 000_81a5c720b14d934a.txt ("Delegated AgentJob labor") over seed
004_85033eb8fc772f12.txt: the Vessel hands delegated work to a JobStore,
and a separate `vessel jobs work` process claims and executes it under a
fenced lease. Nothing here executes anything.

- `submit(job)`: the AgentJob's id is the leased job's durable identity.
  The request becomes preserved evidence (a pure function of the AgentJob,
  with an id derived from the job's), received together with a queued job
  in one transaction. A job the store already holds is adopted, never
  received or started again; the same id for different work is refused
  (`JobConflict`).
- `lookup(job_id)`: published -> SUCCEEDED with a dict result (the staged
  bundle); failed or exhausted -> FAILED with the reason; queued,
  retry_scheduled and waiting_* -> RUNNING (a waiting job needs its named
  dependency and is not a completed fact). None when the store does not
  know the job, so `refresh_delegate` adopts it by submitting again.
- `cancel(job_id)`: `JobStore.withdraw`, then True only when the job is
  contained (`rules.contained`: ended, and no lease on it live). A job
  under a live lease is left alone and False is returned: its worker may
  still stage, so containment is not claimed; the Canceller keeps the Run
  CANCELLING and retries. Once the attempt ends or the lease lapses, the
  withdrawal fails the job, closes a lapsed attempt (its late result is
  refused) and keeps the evidence. A job the store never received has
  nothing that could run, so it is contained; this runtime then refuses to
  submit it later (a relay's adoption racing the cancellation), and submit
  and cancel of one job are serialised in this process.

That refusal is process-local: a second Vessel process adopting the same
never-received job after this one acknowledged its containment is not
prevented (the store has no tombstone for a request it never saw).

Lease liveness is judged on this process's clock. A worker whose clock
runs behind cannot stage after a withdrawal anyway: withdrawal clears the
lease owner, so every fenced write of that worker is refused.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID, uuid5

from runtime.jobs.errors import JobConflict, UnknownJob
from runtime.jobs.models import (
    DEFAULT_POLICY,
    EvidenceRecord,
    JobPolicy,
    JobState,
    LeasedJob,
    new_job,
)
from runtime.jobs.rules import contained
from runtime.jobs.store import JobStore
from runtime.models import AgentJob, AgentJobStatus
from runtime.retry import retrying
from runtime.seams import AgentJobReport, Clock, Entropy
from runtime.sessions import KeyedLocks

T = TypeVar("T")

EVIDENCE_NAMESPACE = UUID("6c0f3a8e-4f57-5d0e-9a53-1d5e4b0a7c21")
"""uuid5 namespace of the evidence ids derived from AgentJob ids."""
MEDIA_TYPE = "text/x-vessel-agent-request"
WITHDRAWN = "withdrawn: the delegating Run was cancelled"
DEFAULT_MODEL_VERSION = "reference-1"
"""The version `vessel jobs work --model reference` calls."""


def evidence_id(job_id: UUID) -> UUID:
    return uuid5(EVIDENCE_NAMESPACE, f"agent-job:{job_id}")


def request_text(request: dict[str, Any]) -> str:
    """The request as preserved evidence: one `key: value` line per field, by key.

    Strings without line breaks are written as they are, anything else as
    compact sorted JSON, so the text is a pure function of the request.
    """
    lines = []
    for key in sorted(request):
        value = request[key]
        plain = isinstance(value, str) and "\n" not in value and "\r" not in value
        text = value if plain else json.dumps(value, sort_keys=True, separators=(",", ":"))
        name = key if ":" not in key and "\n" not in key else json.dumps(key)
        lines.append(f"{name}: {text}")
    return "\n".join(lines)


def report_of(job: LeasedJob) -> AgentJobReport:
    """What a leased job's durable state says of the delegated job."""
    if job.state is JobState.PUBLISHED:
        result: dict[str, Any] = dict(job.bundle or {})
        result.update(leased_job=str(job.id), interpretation=job.interpretation,
                      model_version=job.model_version)
        return AgentJobReport(status=AgentJobStatus.SUCCEEDED, result=result)
    if job.state in (JobState.FAILED, JobState.EXHAUSTED):
        return AgentJobReport(
            status=AgentJobStatus.FAILED,
            result={"state": job.state.value, "error": job.error, "leased_job": str(job.id)},
        )
    return AgentJobReport(status=AgentJobStatus.RUNNING)


@dataclass
class LeasedAgentRuntime:
    """Delegated labour as leased jobs of one workspace (see the module docstring)."""

    store: JobStore
    clock: Clock
    workspace: str
    model_version: str = DEFAULT_MODEL_VERSION
    policy: JobPolicy = DEFAULT_POLICY
    entropy: Entropy | None = None
    """When given, each store call is retried on LedgerUnavailable (all are idempotent)."""
    contained_unknown: set[UUID] = field(default_factory=set)
    """Jobs acknowledged as contained before the store ever received them."""
    locks: KeyedLocks = field(default_factory=KeyedLocks)

    def receipt(self, job: AgentJob) -> tuple[EvidenceRecord, LeasedJob]:
        """The evidence and queued job for `job`: a pure function of the AgentJob."""
        evidence = EvidenceRecord(
            id=evidence_id(job.id),
            workspace=self.workspace,
            media_type=MEDIA_TYPE,
            payload=request_text(job.request),
            received_at=job.created_at,
        )
        return evidence, new_job(job.id, evidence, self.model_version, job.created_at, self.policy)

    async def submit(self, job: AgentJob) -> None:
        evidence, leased = self.receipt(job)
        async with self.locks.hold(str(job.id)):
            if job.id in self.contained_unknown:
                return  # its cancellation was acknowledged: it must never start
            known = await self._call(lambda: self.store.get(job.id))
            if known is not None:
                if known.evidence_id != evidence.id or known.workspace != self.workspace:
                    raise JobConflict(job.id, "the job id is already used for different work")
                return  # adopted: never received or started again
            await self._call(lambda: self.store.receive(evidence, leased))

    async def lookup(self, job_id: UUID) -> AgentJobReport | None:
        job = await self._call(lambda: self.store.get(job_id))
        return None if job is None else report_of(job)

    async def cancel(self, job_id: UUID) -> bool:
        async with self.locks.hold(str(job_id)):
            now = self.clock.now()
            try:
                job = await self._call(lambda: self.store.withdraw(job_id, WITHDRAWN, now))
            except UnknownJob:
                self.contained_unknown.add(job_id)
                return True  # never received: nothing exists that could run
            return contained(job, now)

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        if self.entropy is None:
            return await op()
        return await retrying(self.entropy, op)
