"""The service side of the simulated world (seed 000_81a5c720b14d934a.txt,
"Service job attempts").

- `SimProvider`: the external provider behind ServiceJobAttempt@1. It keeps
  every job it ever started (its effects) by idempotency key, and every
  transmission that reached it. What it can prove is drawn per seed:
  same-key replay, lookups that prove absence, both, or neither. A
  transmission reaches it at once; latency and faults act on the answer.
- `SimDriver`: one process's ServiceDriver. Faults: the network delivers a
  submission twice (only to same-key replay providers: a provider without
  replay is assumed to receive each transmission once), the answer to a
  submit or cancel is lost after the provider acted, a call never answers,
  the provider refuses a submission (provably before any effect, so only for
  a key it holds no job for), and lookups lie (report unknown) for a while —
  only where the provider does not claim that lookups prove absence, or
  replays the key. A process dying after the provider started the job, with
  its id not yet persisted, is the catalogued `service.submitted_before_ack`
  (ProcessFaults of the service context), not a driver fault.
- `SimServiceStore`: the ServiceAttemptStore seam of one process over the
  world's durable MemoryServiceStore, with storage faults and crashes after
  a commit rolled at `service.<method>`.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from runtime.adapters.memory.gate import BEFORE_APPLY
from runtime.errors import LedgerUnavailable, ProcessCrashed
from runtime.service.driver import (
    KeyReuseRejected,
    ProviderReport,
    ProviderStatus,
    ServiceSubmission,
    SubmitAck,
    SubmitRejected,
)
from runtime.service.errors import ServiceError
from runtime.service.models import ServiceJobAttempt
from sim.faults.plan import FaultKind
from sim.processes import Incarnation, fire

if TYPE_CHECKING:
    from runtime.adapters.memory.service_store import MemoryServiceStore
    from sim.world import World

T = TypeVar("T")

LIVE = (ProviderStatus.ACCEPTED, ProviderStatus.RUNNING)
PROFILES = {
    "replay+absence": (True, True),
    "replay": (True, False),
    "absence": (False, True),
    "none": (False, False),
}
"""Provider capabilities: (replays_same_key, lookup_proves_absence)."""


@dataclass
class ProviderJob:
    job_id: str
    key: str
    digest: str
    running_at: float
    finish_at: float
    outcome: ProviderStatus
    status: ProviderStatus = ProviderStatus.ACCEPTED
    result: dict[str, Any] | None = None
    usage: dict[str, float] | None = None


@dataclass
class SimProvider:
    world: World
    profile: str = "replay+absence"
    jobs: dict[str, ProviderJob] = field(default_factory=dict)
    by_key: dict[str, list[str]] = field(default_factory=dict)
    """Every job started under each idempotency key: its effects."""
    received: list[tuple[str, str, int]] = field(default_factory=list)
    """Every transmission that reached the provider: (key, digest, transmission)."""
    hidden_until: dict[str, float] = field(default_factory=dict)
    busy_share: float = 0.0
    """Share of first transmissions of a key the provider refuses, slowly, as busy (a
    scenario sets it; heal clears it)."""
    in_flight: float = 0.0
    """Share of transmissions that travel 1-15 s before they reach the provider, so a
    lookup or cancel meanwhile finds nothing and the job starts after it (a scenario
    sets it; heal clears it). The answer follows the landing."""
    slow_replies: float = 0.0
    """Share of lookups and submits whose answer reaches the process 5-20 s late (inside
    the 30 s deadline): it tells what the provider held when it answered, not on arrival
    (a scenario sets it; heal clears it)."""

    def configure(self, rng: random.Random) -> None:
        self.profile = rng.choice(sorted(PROFILES))
        self.world.trace.emit("provider", "provider.profile", profile=self.profile)

    @property
    def replays_same_key(self) -> bool:
        return PROFILES[self.profile][0]

    @property
    def lookup_proves_absence(self) -> bool:
        return PROFILES[self.profile][1]

    @property
    def may_lie(self) -> bool:
        """A lying lookup must not break a proof the provider claims to give: a provider
        whose lookup proves absence never hides a job (reconciliation would take the empty
        answer as no effect, and with a cancel requested settle CANCELLED over a live job),
        whether or not it also replays by key."""
        return not self.lookup_proves_absence

    def heal(self) -> None:
        self.hidden_until.clear()
        self.busy_share = 0.0
        self.slow_replies = 0.0
        self.in_flight = 0.0

    def receive(self, sub: ServiceSubmission) -> str:
        """A transmission arrives: replay the key's job, or start a new one (an effect)."""
        self.received.append((sub.idempotency_key, sub.request_digest, sub.transmission))
        self.world.checker.on_provider_transmission(sub.idempotency_key, sub.request_digest)
        known = self.by_key.get(sub.idempotency_key)
        if known and self.replays_same_key:
            if self.jobs[known[0]].digest != sub.request_digest:
                raise KeyReuseRejected("the key is bound to another payload")
            return known[0]
        rng = self.world.streams.actors
        now = anyio.current_time()
        job_id = f"prov-{len(self.jobs) + 1}"
        running = now + round(rng.uniform(1.0, 20.0), 3)
        outcome = ProviderStatus.SUCCEEDED if rng.random() < 0.8 else ProviderStatus.FAILED
        job = ProviderJob(job_id, sub.idempotency_key, sub.request_digest, running,
                          running + round(rng.uniform(5.0, 120.0), 3), outcome)
        self.jobs[job_id] = job
        self.by_key.setdefault(sub.idempotency_key, []).append(job_id)
        self.world.trace.emit("provider", "provider.started", job=job_id, key=job.key,
                              transmission=sub.transmission)
        self.world.checker.on_provider_effect(sub.idempotency_key)
        return job_id

    def _advance(self, job: ProviderJob) -> None:
        now = anyio.current_time()
        if job.status is ProviderStatus.ACCEPTED and now >= job.running_at:
            job.status = ProviderStatus.RUNNING
        if job.status is ProviderStatus.RUNNING and now >= job.finish_at:
            job.status = job.outcome
            if job.outcome is ProviderStatus.SUCCEEDED:
                job.result = {"artifact": f"{job.job_id}.out"}
            job.usage = {"seconds": round(job.finish_at - job.running_at, 3)}
            self.world.trace.emit("provider", "provider.finished", job=job.job_id,
                                  status=job.status)

    def job_of(self, key: str, provider_job_id: str | None = None) -> ProviderJob | None:
        """The provider's truth about a key (or an exact job), advanced to now."""
        job_id = provider_job_id
        if job_id is None:
            known = self.by_key.get(key)
            job_id = known[0] if known else None
        job = None if job_id is None else self.jobs.get(job_id)
        if job is not None:
            self._advance(job)
        return job

    def live_jobs(self, key: str) -> list[ProviderJob]:
        jobs = [self.jobs[j] for j in self.by_key.get(key, [])]
        for job in jobs:
            self._advance(job)
        return [j for j in jobs if j.status in LIVE]

    def lookup(self, key: str, provider_job_id: str | None) -> ProviderReport | None:
        if self.hidden_until.get(key, 0.0) > anyio.current_time():
            return None  # the lie: an existing job reported unknown
        job = self.job_of(key, provider_job_id)
        if job is None:
            return None
        return ProviderReport(
            provider_job_id=job.job_id, idempotency_key=job.key, request_digest=job.digest,
            status=job.status, progress_cursor=None if job.status is ProviderStatus.ACCEPTED
            else f"{job.job_id}@running", result=job.result, usage=job.usage,
        )

    def cancel(self, key: str, provider_job_id: str | None) -> bool:
        """Contain every live job of the key; True: nothing of it executes any more."""
        for job in self.live_jobs(key):
            if provider_job_id is None or job.job_id == provider_job_id:
                job.status = ProviderStatus.CANCELLED
                self.world.trace.emit("provider", "provider.cancelled", job=job.job_id)
        return not self.live_jobs(key)


class SimDriver:
    """The ServiceDriver of one process."""

    def __init__(self, world: World, proc: Incarnation) -> None:
        self.world = world
        self.proc = proc
        self.provider = world.provider

    @property
    def lookup_proves_absence(self) -> bool:
        return self.provider.lookup_proves_absence

    @property
    def replays_same_key(self) -> bool:
        return self.provider.replays_same_key

    async def _answer(self, low: float, high: float) -> None:
        await anyio.sleep(round(self.world.streams.actors.uniform(low, high), 3))

    def _slow(self) -> bool:
        """Whether this call's answer travels slowly (drawn only where a scenario asks)."""
        share = self.provider.slow_replies
        return share > 0 and self.world.streams.actors.random() < share

    async def _late(self, key: str, call: str, found: bool) -> None:
        """The provider answered; the answer arrives 5-20 s later. Meanwhile another
        process may record the job, or find it gone, so what arrives is past truth."""
        self.world.trace.emit("provider", "provider.slow_reply", key=key, call=call,
                              found=found)
        await self._answer(5.0, 20.0)
        self.proc.check_alive()

    async def submit(self, submission: ServiceSubmission) -> SubmitAck:
        proc, provider = self.proc, self.provider
        proc.check_alive()
        kinds: tuple[FaultKind, ...] = (FaultKind.SERVICE_ACK_LOST, FaultKind.SERVICE_TIMEOUT)
        if not provider.by_key.get(submission.idempotency_key):
            kinds = (FaultKind.ACTOR_FAIL, *kinds)
        if provider.replays_same_key:
            kinds = (*kinds, FaultKind.PROVIDER_DUPLICATE)
        fault, _ = proc.fire("service.driver.submit", kinds)
        if fault is FaultKind.ACTOR_FAIL:
            await self._answer(0.1, 2.0)
            raise SubmitRejected("the provider refused the request before starting it")
        if fault is None and provider.busy_share \
                and not provider.by_key.get(submission.idempotency_key) \
                and self.world.streams.actors.random() < provider.busy_share:
            # A busy provider's refusal answers slowly: another worker may re-submit on
            # proof of no effect meanwhile, and this rejection proves nothing about that one.
            await self._answer(5.0, 25.0)
            raise SubmitRejected("the provider is busy and refused the request unstarted")
        slow = fault is None and self._slow()
        if fault is None and provider.in_flight > 0 \
                and self.world.streams.actors.random() < provider.in_flight:
            delay = round(self.world.streams.actors.uniform(1.0, 15.0), 3)
            self.world.trace.emit("provider", "provider.in_flight", key=submission.idempotency_key,
                                  transmission=submission.transmission, delay=delay)
            await anyio.sleep(delay)  # sent, not yet received: the effect comes later
        job_id = provider.receive(submission)
        if fault is FaultKind.PROVIDER_DUPLICATE:
            provider.receive(submission)
        await self._answer(0.2, 5.0)
        if slow:
            await self._late(submission.idempotency_key, "submit", True)
        if fault is FaultKind.SERVICE_ACK_LOST:
            raise ConnectionResetError("the submit acknowledgement was lost")
        if fault is FaultKind.SERVICE_TIMEOUT:
            await anyio.sleep_forever()
        proc.check_alive()
        return SubmitAck(provider_job_id=job_id)

    async def lookup(
        self, *, idempotency_key: str, provider_job_id: str | None
    ) -> ProviderReport | None:
        proc, provider = self.proc, self.provider
        proc.check_alive()
        kinds: tuple[FaultKind, ...] = (FaultKind.SERVICE_TIMEOUT,)
        if provider.may_lie:
            kinds = (*kinds, FaultKind.LOOKUP_LIES)
        fault, amount = proc.fire("service.driver.lookup", kinds)
        if fault is FaultKind.LOOKUP_LIES:
            until = anyio.current_time() + amount
            provider.hidden_until[idempotency_key] = max(
                until, provider.hidden_until.get(idempotency_key, 0.0)
            )
        slow = fault is None and self._slow()
        await self._answer(0.1, 2.0)
        if fault is FaultKind.SERVICE_TIMEOUT:
            await anyio.sleep_forever()
        proc.check_alive()
        report = provider.lookup(idempotency_key, provider_job_id)
        if slow:
            await self._late(idempotency_key, "lookup", report is not None)
        return report

    async def cancel(self, *, idempotency_key: str, provider_job_id: str | None) -> bool:
        proc, provider = self.proc, self.provider
        proc.check_alive()
        kinds = (FaultKind.ACTOR_FAIL, FaultKind.SERVICE_ACK_LOST, FaultKind.SERVICE_TIMEOUT)
        fault, _ = proc.fire("service.driver.cancel", kinds)
        await self._answer(0.1, 2.0)
        if fault is FaultKind.ACTOR_FAIL:
            return False  # the provider would not contain it (yet)
        contained = provider.cancel(idempotency_key, provider_job_id)
        if fault is FaultKind.SERVICE_ACK_LOST:
            raise ConnectionResetError("the cancellation acknowledgement was lost")
        if fault is FaultKind.SERVICE_TIMEOUT:
            await anyio.sleep_forever()
        proc.check_alive()
        return contained


SERVICE_READS = ("get", "by_key", "owned_by", "open_attempts")
SERVICE_WRITES = (
    "prepare", "begin_submit", "begin_resubmit", "accept", "mark_running",
    "mark_indeterminate", "settle", "request_cancel", "add_evidence",
)
STORE_READ = (FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_LATENCY)
STORE_WRITE = (FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_AMBIGUOUS, FaultKind.LEDGER_LATENCY)


class SimServiceStore:
    """The ServiceAttemptStore seam of one process."""

    def __init__(self, world: World, proc: Incarnation) -> None:
        self.world = world
        self.proc = proc
        self.inner: MemoryServiceStore = world.services

    async def _tx(self, name: str, write: bool, op: Callable[[], Awaitable[T]]) -> T:
        proc, world = self.proc, self.world
        proc.check_alive()
        kinds = (*STORE_WRITE, FaultKind.WORKER_CRASH) if write else STORE_READ
        fault, amount = fire(world, f"service.{name}", kinds)
        if fault is FaultKind.LEDGER_LATENCY:
            await anyio.sleep(amount)
        if fault is FaultKind.LEDGER_TRANSIENT:
            raise LedgerUnavailable(f"injected transient error before commit of service.{name}")
        try:
            result = await proc.guard(op)
        except ServiceError as exc:
            if write:
                world.trace.emit("service", f"tx.{name}", by=proc.id, refused=type(exc).__name__)
            raise
        finally:
            if write:
                world.checker.after_service_write(name)
        if write and isinstance(result, ServiceJobAttempt):
            world.trace.emit("service", f"tx.{name}", by=proc.id, attempt=result.id,
                             state=result.state, version=result.version)
        if fault is FaultKind.WORKER_CRASH:
            proc.crash(f"crash after service.{name}")
            raise ProcessCrashed(proc.id)
        if fault is FaultKind.LEDGER_AMBIGUOUS:
            raise LedgerUnavailable(
                f"injected ambiguous commit of service.{name}: applied, then lost"
            )
        return result


Judge = Callable[[ServiceJobAttempt | None, Any, BaseException | None], None]
"""A checker report on one write: the attempt its transaction found, the write's answer
(None when it raised) and the error it raised (None when it answered)."""


def _judged(store: SimServiceStore, args: tuple[Any, ...], op: Callable[[], Awaitable[Any]],
            judge: Judge) -> Callable[[], Awaitable[Any]]:
    """`op` (one store write), with the attempt its transaction found handed to `judge`
    with the outcome: the memory store decides right after its gate hook, so the attempt
    read there is the one the decision saw (no checkpoint added: traces unchanged)."""
    inner = store.inner

    async def judged() -> Any:
        outer = BEFORE_APPLY.get()
        seen: list[ServiceJobAttempt | None] = []

        def hook() -> None:
            if outer is not None:
                outer()
            seen.append(inner.attempt_table.get(args[0]))

        token = BEFORE_APPLY.set(hook)
        try:
            result = await op()
        except ServiceError as exc:
            if seen:
                judge(seen[0], None, exc)
            raise
        finally:
            BEFORE_APPLY.reset(token)
        if seen:
            judge(seen[0], result, None)
        return result

    return judged


def _settle_judge(store: SimServiceStore, args: tuple[Any, ...]) -> Judge:
    """A settle is judged on the outcome and evidence it asked for (args 1 and 2)."""
    checker = store.world.checker
    return lambda found, _result, exc: checker.on_service_settle(found, args[1], args[2], exc)


def _indeterminate_judge(store: SimServiceStore, args: tuple[Any, ...]) -> Judge:
    """A mark_indeterminate is judged on its evidence (arg 1) and the attempt it answered."""
    checker = store.world.checker
    return lambda found, result, exc: checker.on_service_indeterminate(found, args[1], result,
                                                                       exc)


def _running_judge(store: SimServiceStore, args: tuple[Any, ...]) -> Judge:
    """A mark_running is judged on the progress it reports (arg 1) and what it answered."""
    checker = store.world.checker
    return lambda found, result, exc: checker.on_service_running(found, args[1], result, exc)


def _resubmit_judge(store: SimServiceStore, args: tuple[Any, ...]) -> Judge:
    """A begin_resubmit is judged on its proof (arg 1) and the attempt it answered."""
    checker = store.world.checker
    return lambda found, result, exc: checker.on_service_resubmit(found, args[1], result, exc)


def _method(name: str, write: bool) -> Callable[..., Awaitable[Any]]:
    async def method(self: SimServiceStore, *args: Any, **kwargs: Any) -> Any:
        inner = getattr(self.inner, name)
        op: Callable[[], Awaitable[Any]] = lambda: inner(*args, **kwargs)  # noqa: E731
        if name == "settle" and len(args) == 4:
            op = _judged(self, args, op, _settle_judge(self, args))
        if name == "mark_indeterminate" and len(args) == 3:
            op = _judged(self, args, op, _indeterminate_judge(self, args))
        if name == "begin_resubmit" and len(args) == 3:
            op = _judged(self, args, op, _resubmit_judge(self, args))
        if name == "mark_running" and len(args) == 3:
            op = _judged(self, args, op, _running_judge(self, args))
        return await self._tx(name, write, op)

    method.__name__ = name
    return method


for _name in SERVICE_READS:
    setattr(SimServiceStore, _name, _method(_name, False))
for _name in SERVICE_WRITES:
    setattr(SimServiceStore, _name, _method(_name, True))
