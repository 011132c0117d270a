"""`run_once`: one step of the leased worker (seed 004_85033eb8fc772f12.txt).

One call claims at most one eligible job in the authorised workspace and
takes it through one attempt:

1. `claim_one` (one transaction): fence + 1, lease of 90 s, one worker
   attempt spent. None means nothing was eligible.
2. Checks that need no model: the preserved payload must fit the model's
   context (else the job fails and the evidence stays), and the client must
   be the job's model version (else the attempt is handed back for retry
   without spending a call).
3. `reserve_model_call` (one transaction) before any network traffic, so a
   killed process still consumes its call budget.
4. The model call, outside any transaction, under a 45 s deadline, while
   the lease is renewed every 20 s. Losing the lease cancels the call. A
   reply in hand and nothing staged yet is the catalogued crash window
   `job.inference_returned`.
5. `stage` (owner, fence, lease and model version checked), or
   `schedule_retry` (bounded; it becomes `exhausted` when budgets are
   spent), or `fail` for invalid output and payloads beyond the context.

A result whose fence was overtaken is refused by the store and only its
usage is kept; `run_once` then returns the job as the store holds it. The
returned job's `state` and `bundle` are what callers inspect: a successful
inference may still be waiting on ontology, identity or review.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import anyio

from runtime import faults
from runtime.faults import NoFaults
from runtime.jobs.errors import (
    CallBudgetExhausted,
    FenceError,
    ModelVersionMismatch,
    UnknownJob,
    WorkspaceNotAuthorised,
)
from runtime.jobs.model import (
    ContextTooLarge,
    InvalidOutput,
    ModelClient,
    ModelError,
    ModelReply,
    ModelRequest,
    read_bundle,
)
from runtime.jobs.models import (
    DEFAULT_POLICY,
    AttemptFailure,
    JobPolicy,
    LeasedJob,
    StagedResult,
)
from runtime.jobs.store import JobStore
from runtime.retry import retrying
from runtime.seams import Clock, Entropy, FaultPoints

log = logging.getLogger(__name__)

T = TypeVar("T")

PAYLOAD_TOO_LARGE = "preserved payload exceeds the model context"
EVIDENCE_MISSING = "the job's evidence is missing"
MODEL_VERSION_DIFFERS = "this worker's model version differs from the job's"


@dataclass(frozen=True)
class WorkerContext:
    """What one worker step needs. `scopes` are the workspaces its credential grants."""

    store: JobStore
    model: ModelClient
    clock: Clock
    workspace: str
    worker_id: str
    scopes: tuple[str, ...]
    policy: JobPolicy = DEFAULT_POLICY
    entropy: Entropy | None = None
    """When given, the closing transactions (all idempotent) are retried on
    LedgerUnavailable; without it a storage error propagates at once."""
    faults: FaultPoints = field(default_factory=NoFaults)
    """Named crash windows (runtime.faults); production: the no-op NoFaults."""


class _LeaseLost(Exception):
    """The renewal found the lease gone while the model call was running."""


def authorise(ctx: WorkerContext) -> None:
    if not ctx.workspace or ctx.workspace not in ctx.scopes:
        raise WorkspaceNotAuthorised(ctx.workspace, ctx.scopes)


async def run_once(ctx: WorkerContext) -> LeasedJob | None:
    """Claim and attempt at most one job; its state afterwards, or None."""
    authorise(ctx)
    job = await ctx.store.claim_one(
        ctx.workspace, ctx.worker_id, ctx.clock.now(), ctx.policy.lease_s
    )
    if job is None:
        return None
    return await _Attempt(ctx, job).run()


class _Attempt:
    def __init__(self, ctx: WorkerContext, job: LeasedJob) -> None:
        self.ctx = ctx
        self.job = job
        self.fence = job.fence
        self.owner = ctx.worker_id

    async def run(self) -> LeasedJob:
        ctx, job = self.ctx, self.job
        evidence = await ctx.store.evidence(job.evidence_id)
        if evidence is None:
            return await self._fail(AttemptFailure(reason=EVIDENCE_MISSING))
        if len(evidence.payload) > ctx.model.context_limit:
            return await self._fail(
                AttemptFailure(
                    reason=PAYLOAD_TOO_LARGE,
                    diagnostic={
                        "payload_chars": len(evidence.payload),
                        "context_limit": ctx.model.context_limit,
                        "evidence_id": str(evidence.id),
                    },
                )
            )
        if ctx.model.version != job.model_version:
            return await self._retry(
                AttemptFailure(
                    reason=MODEL_VERSION_DIFFERS,
                    diagnostic={"worker_model": ctx.model.version, "job_model": job.model_version},
                )
            )
        try:
            job = await ctx.store.reserve_model_call(
                job.id, self.fence, self.owner, ctx.clock.now()
            )
        except CallBudgetExhausted as exc:
            return await self._close(ctx.store.exhaust, AttemptFailure(reason=str(exc)))
        except FenceError:
            return await self._current()
        request = ModelRequest(
            job_id=job.id,
            workspace=job.workspace,
            interpretation=job.interpretation,
            call=job.model_calls_reserved,
            model_version=job.model_version,
            media_type=evidence.media_type,
            payload=evidence.payload,
        )
        try:
            reply = await self._call(request)
        except _LeaseLost:
            return await self._current()
        except TimeoutError:
            deadline = ctx.policy.model_deadline_s
            return await self._retry(AttemptFailure(reason=f"model deadline of {deadline:g} s"))
        except ContextTooLarge as exc:
            return await self._fail(
                AttemptFailure(reason=f"{PAYLOAD_TOO_LARGE}: {exc}", usage=exc.usage)
            )
        except ModelError as exc:  # retryable, or an unclassified client report
            return await self._retry(AttemptFailure(reason=f"retryable: {exc}", usage=exc.usage))
        except Exception as exc:  # transport-level: the usage is unknown
            return await self._retry(AttemptFailure(reason=f"{type(exc).__name__}: {exc}"))
        await ctx.faults.point(
            faults.JOB_INFERENCE_RETURNED, job_id=job.id, fence=self.fence, call=request.call
        )
        return await self._stage(reply)

    async def _call(self, request: ModelRequest) -> ModelReply:
        """The model call under its deadline, with the lease renewed beside it."""
        ctx = self.ctx
        replies: list[ModelReply] = []
        errors: list[Exception] = []
        lost = anyio.Event()

        async def renew() -> None:
            while True:
                await anyio.sleep(ctx.policy.renew_every_s)
                try:
                    await ctx.store.renew(self.job.id, self.fence, self.owner, ctx.clock.now())
                except FenceError:
                    lost.set()
                    return
                except Exception as exc:  # storage trouble: try again next period
                    log.warning("lease renewal of %s failed: %s", self.job.id, exc)

        async with anyio.create_task_group() as tg:

            async def call() -> None:
                try:
                    with anyio.fail_after(ctx.policy.model_deadline_s):
                        replies.append(await ctx.model.extract(request))
                except Exception as exc:
                    errors.append(exc)
                tg.cancel_scope.cancel()

            async def watch() -> None:
                await lost.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(renew)
            tg.start_soon(watch)
            tg.start_soon(call)
        if lost.is_set() and not replies and not errors:
            raise _LeaseLost
        if errors:
            raise errors[0]
        return replies[0]

    async def _stage(self, reply: ModelReply) -> LeasedJob:
        ctx = self.ctx
        try:
            state, bundle = read_bundle(reply.output)
        except InvalidOutput as exc:
            failure = AttemptFailure(
                reason=f"invalid model output: {exc}",
                usage=reply.usage,
                diagnostic={"output": _json_safe(reply.output)},
            )
            return await self._fail(failure)
        result = StagedResult(state=state, bundle=bundle, usage=reply.usage)
        try:
            return await self._ledger(
                lambda: ctx.store.stage(
                    self.job.id,
                    self.fence,
                    self.owner,
                    reply.model_version,
                    result,
                    ctx.clock.now(),
                )
            )
        except ModelVersionMismatch as exc:
            # The reply came from another model; its usage is already logged.
            return await self._retry(AttemptFailure(reason=str(exc)))
        except FenceError as exc:
            log.info("result of %s fence %s not staged: %s", self.job.id, self.fence, exc)
            return await self._current()

    async def _retry(self, failure: AttemptFailure) -> LeasedJob:
        ctx = self.ctx
        now = ctx.clock.now()
        retry_at = now + timedelta(seconds=ctx.policy.retry_delay(self.job.attempts_used))

        async def schedule(
            job_id: Any, fence: int, owner: str, failure: AttemptFailure, now: Any
        ) -> LeasedJob:
            return await ctx.store.schedule_retry(job_id, fence, owner, retry_at, failure, now)

        return await self._close(schedule, failure)

    async def _fail(self, failure: AttemptFailure) -> LeasedJob:
        return await self._close(self.ctx.store.fail, failure)

    async def _close(
        self, op: Callable[..., Awaitable[LeasedJob]], failure: AttemptFailure
    ) -> LeasedJob:
        ctx = self.ctx
        try:
            return await self._ledger(
                lambda: op(self.job.id, self.fence, self.owner, failure, ctx.clock.now())
            )
        except FenceError as exc:
            log.info("attempt %s of %s not closed: %s", self.fence, self.job.id, exc)
            return await self._current()

    async def _current(self) -> LeasedJob:
        job = await self.ctx.store.get(self.job.id)
        if job is None:  # pragma: no cover - jobs are never deleted
            raise UnknownJob(self.job.id)
        return job

    async def _ledger(self, op: Callable[[], Awaitable[T]]) -> T:
        if self.ctx.entropy is None:
            return await op()
        return await retrying(self.ctx.entropy, op)


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
