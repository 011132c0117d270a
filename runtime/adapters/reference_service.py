"""A deterministic, in-process ServiceDriver with lookup, for tests and the simulator.

Seed 000_81a5c720b14d934a.txt, "Service job attempts": the provider keeps
its jobs by idempotency key and by provider job id. With `replays_same_key`
a repeated key with the same payload returns the original job and a changed
payload is rejected (`KeyReuseRejected`); without it every transmission
starts a new job, which is exactly the duplicate effect an unproven
re-submit would cause. `effects` lists every job ever started.

Faults are queued per call in `submit_faults`, `lookup_faults` and
`cancel_faults` (one entry consumed per call, None for a clean call):

- submit: "reject" (refused, provably no effect), "drop" (lost before the
  provider: no effect, an ambiguous error), "lose_ack" (started, then the
  acknowledgement is lost), "malformed_ack" (started, no job id in the
  answer), "hang" (started, then never answers);
- lookup: "fail" (raises), "hide" (answers None although the job exists:
  a lying lookup), "hang";
- cancel: "lose_ack" (contained, then the acknowledgement is lost),
  "refuse" (not contained).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from runtime.service.driver import (
    KeyReuseRejected,
    ProviderReport,
    ProviderStatus,
    ServiceSubmission,
    SubmitAck,
    SubmitRejected,
)

TERMINAL = (ProviderStatus.SUCCEEDED, ProviderStatus.FAILED, ProviderStatus.CANCELLED)


@dataclass
class ReferenceServiceDriver:
    lookup_proves_absence: bool = True
    replays_same_key: bool = True
    submit_faults: list[str | None] = field(default_factory=list)
    lookup_faults: list[str | None] = field(default_factory=list)
    cancel_faults: list[str | None] = field(default_factory=list)
    transmissions: list[ServiceSubmission] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)
    jobs: dict[str, ProviderReport] = field(default_factory=dict)
    """Provider jobs by provider job id."""
    by_key: dict[str, str] = field(default_factory=dict)
    """The first provider job id started under each idempotency key."""
    finish_after_s: float | None = None
    """When set, a job left alone succeeds this long after it started (local runs)."""
    started_at: dict[str, float] = field(default_factory=dict)

    async def submit(self, submission: ServiceSubmission) -> SubmitAck:
        fault = self.submit_faults.pop(0) if self.submit_faults else None
        self.transmissions.append(submission)
        if fault == "reject":
            raise SubmitRejected("the provider refused the request before starting it")
        if fault == "drop":
            raise ConnectionError("the request never reached the provider")
        known = self.by_key.get(submission.idempotency_key)
        if known is not None and self.replays_same_key:
            if self.jobs[known].request_digest != submission.request_digest:
                raise KeyReuseRejected("the key is bound to another payload")
            job_id = known
        else:
            job_id = self._start(submission)
        if fault == "lose_ack":
            raise ConnectionResetError("the acknowledgement was lost")
        if fault == "malformed_ack":
            return SubmitAck(provider_job_id=None)
        if fault == "hang":
            await anyio.sleep_forever()
        return SubmitAck(provider_job_id=job_id)

    def _start(self, submission: ServiceSubmission) -> str:
        job_id = f"prov-{len(self.effects) + 1}"
        self.effects.append(job_id)
        self.by_key.setdefault(submission.idempotency_key, job_id)
        if self.finish_after_s is not None:
            self.started_at[job_id] = anyio.current_time()
        self.jobs[job_id] = ProviderReport(
            provider_job_id=job_id,
            idempotency_key=submission.idempotency_key,
            request_digest=submission.request_digest,
            status=ProviderStatus.ACCEPTED,
        )
        return job_id

    async def lookup(
        self, *, idempotency_key: str, provider_job_id: str | None
    ) -> ProviderReport | None:
        fault = self.lookup_faults.pop(0) if self.lookup_faults else None
        if fault == "fail":
            raise ConnectionError("lookup unavailable")
        if fault == "hang":
            await anyio.sleep_forever()
        job_id = provider_job_id or self.by_key.get(idempotency_key)
        if job_id is not None:
            self._finish_on_time(job_id)
        report = None if job_id is None else self.jobs.get(job_id)
        if fault == "hide":
            return None
        return report

    def _finish_on_time(self, job_id: str) -> None:
        report, since = self.jobs.get(job_id), self.started_at.get(job_id)
        if report is None or since is None or self.finish_after_s is None:
            return
        if report.status not in TERMINAL and anyio.current_time() - since >= self.finish_after_s:
            self.progress(job_id, ProviderStatus.SUCCEEDED, result={"artifact": f"{job_id}.out"},
                          usage={"seconds": self.finish_after_s})

    async def cancel(self, *, idempotency_key: str, provider_job_id: str | None) -> bool:
        fault = self.cancel_faults.pop(0) if self.cancel_faults else None
        if fault == "refuse":
            return False
        job_id = provider_job_id or self.by_key.get(idempotency_key)
        report = None if job_id is None else self.jobs.get(job_id)
        if report is not None and report.status not in TERMINAL:
            self.jobs[report.provider_job_id] = report.model_copy(
                update={"status": ProviderStatus.CANCELLED}
            )
        if fault == "lose_ack":
            raise ConnectionResetError("the cancellation acknowledgement was lost")
        return True

    # -- the provider's side, driven by tests ------------------------------------------

    def progress(
        self,
        provider_job_id: str,
        status: ProviderStatus,
        *,
        result: dict[str, Any] | None = None,
        usage: dict[str, float] | None = None,
        cursor: str | None = None,
    ) -> None:
        report = self.jobs[provider_job_id]
        self.jobs[provider_job_id] = report.model_copy(
            update={"status": status, "result": result, "usage": usage, "progress_cursor": cursor}
        )
