"""The leased-job side of the simulated world (seed 004_85033eb8fc772f12.txt).

- `SimModel`: the external model provider. It outlives every worker and keeps
  one record per model call (job, interpretation, reserved call number): what
  the provider consumed and which usage actually reached a live worker. The
  checker reads these records; it never reads the worker's memory.
- `SimModelClient`: one worker process's ModelClient. A call may hang past the
  45 s deadline, have its reply lost after the provider did (and billed) the
  work, fail retryably, answer with an output that is not a bundle (MALFORMED),
  or find its process dead or frozen when it returns.
- `SimJobStore`: the JobStore seam of one process (or of an external actor,
  `proc=None`) over the world's durable MemoryJobStore, with storage faults,
  stalls and crashes rolled at `jobs.<method>`; every committed write goes to
  the checker.
- `worker_faults`: the FaultPoints of one worker process. The window between a
  model reply and its staging is the catalogued `job.inference_returned`: a
  crash there kills the process, a late result there reaches `stage` only
  after its lease lapsed (no seam-level duplicate at `jobs.stage`).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import anyio

from runtime import faults
from runtime.adapters.memory.gate import BEFORE_APPLY
from runtime.adapters.reference_model import ReferenceModelClient
from runtime.errors import LedgerUnavailable, ProcessCrashed
from runtime.jobs.errors import JobError
from runtime.jobs.model import ModelReply, ModelRequest, RetryableModelError
from runtime.jobs.models import LeasedJob, Usage
from sim.faults.plan import FaultKind
from sim.processes import Process, ProcessFaults, fire

if TYPE_CHECKING:
    from runtime.adapters.memory.jobs_store import MemoryJobStore
    from sim.world import World

T = TypeVar("T")

MODEL_VERSION = "reference-1"
CANARY_VERSION = "reference-2"
"""A newer model one worker already runs: jobs of MODEL_VERSION are not its work."""
SLOW_CALLS = 0.15
"""Share of model calls that take 20-40 s: the lease is renewed while they run."""
MODEL_KINDS = (
    FaultKind.WORKER_CRASH,
    FaultKind.MODEL_HANG,
    FaultKind.MODEL_REPLY_LOST,
    FaultKind.ACTOR_FAIL,
    FaultKind.MODEL_MALFORMED,  # last, and from the side stream: no other draw moves
)
STORE_READ = (FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_LATENCY)
STORE_WRITE = (FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_AMBIGUOUS, FaultKind.LEDGER_LATENCY)

Pace = Callable[[random.Random], tuple[float, bool]]
"""Draws one model call's duration (s) and whether the model is overloaded."""


def _needs(value: Any) -> Callable[[dict[str, Any]], Any]:
    return lambda out: {**out, "needs": value}


MALFORMED: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("needs_number", _needs(3)),
    ("needs_list", _needs(["review"])),
    ("needs_unknown", _needs("approval")),
    ("not_an_object", lambda out: [out]),
    ("assertions_not_a_list", lambda out: {**out, "assertions": "subject: value"}),
    ("assertion_not_an_object", lambda out: {**out, "assertions": [
        *out["assertions"], "subject: value"]}),
    ("unknown_field", lambda out: {**out, "confidence": 0.5}),
)
"""The shapes of a malformed model output (MODEL_MALFORMED), each one the bundle
validator must reject: the well-formed reply, rewritten. Which one a call gets is a
function of the call (its job id and call number), so a replayed plan gives the same."""


def malformed_kind(request: ModelRequest) -> str:
    return MALFORMED[(request.job_id.int + request.call) % len(MALFORMED)][0]


CallKey = tuple[UUID, int, int]
"""(job id, interpretation, reserved call number): one model call."""


@dataclass
class ModelCall:
    worker: str
    at: float
    outcome: str = "out"
    """out (no answer yet) | replied | failed | hung | lost | crashed"""
    billed: Usage | None = None
    """What the provider consumed (known to the provider, not to the worker)."""
    returned: Usage | None = None
    """The usage a live worker received with a reply or an error; None = unknown."""
    malformed: str | None = None
    """The MALFORMED shape the reply's output has; None: a well-formed bundle."""


@dataclass
class SimModel:
    """The model provider: a deterministic reference model behind a network."""

    world: World
    version: str = MODEL_VERSION
    context_limit: int = 4096
    calls: dict[CallKey, ModelCall] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reference = ReferenceModelClient(self.version, self.context_limit)


class SimModelClient:
    """The ModelClient of one worker process."""

    def __init__(self, world: World, proc: Process, version: str | None = None,
                 pace: Pace | None = None) -> None:
        self.world = world
        self.proc = proc
        self.pace = pace
        """When given, it draws each call's duration and whether the model is overloaded
        (answers a retryable error with its usage), and the answer then takes one more
        scheduling step to reach the worker; None: the SLOW_CALLS mix."""
        self.model = world.model
        self.version = version or self.model.version
        self.context_limit = self.model.context_limit
        self.reference = (self.model.reference if self.version == self.model.version
                          else ReferenceModelClient(self.version, self.context_limit))

    async def extract(self, request: ModelRequest) -> ModelReply:
        proc, world, model = self.proc, self.world, self.model
        proc.check_alive()
        key = (request.job_id, request.interpretation, request.call)
        record = ModelCall(worker=proc.id, at=anyio.current_time())
        world.checker.on_model_call(key, record, proc.id, self.version)
        model.calls[key] = record
        world.trace.emit("model", "model.call", job=request.job_id, worker=proc.id,
                         interpretation=request.interpretation, call=request.call)
        fault, _ = proc.fire("model.extract", MODEL_KINDS)
        rng = world.streams.actors
        overloaded = fault is FaultKind.ACTOR_FAIL
        if self.pace is None:
            slow = rng.random() < SLOW_CALLS
            await anyio.sleep(round(rng.uniform(20.0, 40.0) if slow else rng.uniform(0.5, 20.0),
                                    3))
        else:
            delay, busy = self.pace(rng)
            overloaded = overloaded or busy
            await anyio.sleep(delay)
            await anyio.lowlevel.checkpoint()  # the answer crosses the network
        if fault is FaultKind.WORKER_CRASH:
            record.outcome = "crashed"
            proc.crash("crash while a model call is out")
            raise ProcessCrashed(proc.id)
        if fault is FaultKind.MODEL_HANG:
            record.outcome = "hung"
            await anyio.sleep_forever()
        reply = self.reference.reply(request)
        record.billed = reply.usage
        if fault is FaultKind.MODEL_MALFORMED:
            record.malformed = malformed_kind(request)
            rewrite = dict(MALFORMED)[record.malformed]
            reply = reply.model_copy(update={"output": rewrite(reply.output)})
        if fault is FaultKind.MODEL_REPLY_LOST:
            record.outcome = "lost"
            raise ConnectionResetError("the model answered but the reply was lost")
        error: RetryableModelError | None = None
        usage = reply.usage
        if overloaded:
            usage = Usage(input_tokens=len(request.payload), output_tokens=0)
            record.billed = usage
            error = RetryableModelError("the model is overloaded", usage=usage)
        await proc.thaw()  # a frozen process sees the answer only once it runs again
        # No checkpoint from here on: the worker receives exactly what is recorded.
        record.returned = usage
        record.outcome = "failed" if error is not None else "replied"
        if error is not None:
            raise error
        return reply


def worker_faults(proc: Process) -> ProcessFaults:
    """A worker's crash windows; a late result travels at `job.inference_returned`."""
    return ProcessFaults(proc, late=(faults.JOB_INFERENCE_RETURNED,))


JOB_READS = ("get", "evidence", "jobs", "interpretations", "attempts")
JOB_WRITES = (
    "receive", "claim_one", "renew", "reserve_model_call", "stage", "schedule_retry", "fail",
    "exhaust", "reprocess", "withdraw",
)


class SimJobStore:
    """The JobStore seam of one worker process (or of an external actor: proc=None)."""

    def __init__(self, world: World, proc: Process | None) -> None:
        self.world = world
        self.proc = proc
        self.inner: MemoryJobStore = world.jobs
        self.claimed: tuple[UUID, int] | None = None
        """The (job, fence) this process claimed last: the worker loop traces it."""

    async def _tx(self, name: str, write: bool, op: Callable[[], Awaitable[T]]) -> T:
        proc, world = self.proc, self.world
        if proc is not None:
            proc.check_alive()
        kinds = STORE_WRITE if write else STORE_READ
        if proc is not None:
            kinds = (*kinds, FaultKind.WORKER_STALL)
            if write:
                kinds = (*kinds, FaultKind.WORKER_CRASH)
        fault, amount = fire(world, f"jobs.{name}", kinds)
        if fault is FaultKind.WORKER_STALL and proc is not None:
            proc.freeze(amount)
        if fault is FaultKind.LEDGER_LATENCY:
            await anyio.sleep(amount)
        if proc is not None:
            await proc.thaw()
        if fault is FaultKind.LEDGER_TRANSIENT:
            raise LedgerUnavailable(f"injected transient error before commit of jobs.{name}")
        try:
            result = await (proc.guard(op) if proc is not None else op())
        finally:
            if write:
                world.checker.after_job_write(name)
        if fault is FaultKind.WORKER_CRASH and proc is not None:
            proc.crash(f"crash after jobs.{name}")
            raise ProcessCrashed(proc.id)
        if fault is FaultKind.LEDGER_AMBIGUOUS:
            raise LedgerUnavailable(f"injected ambiguous commit of jobs.{name}: applied, then lost")
        return result

    async def _write(self, name: str, op: Callable[[], Awaitable[Any]], job_id: Any,
                     args: tuple[Any, ...] = ()) -> Any:
        who = self.proc.id if self.proc is not None else None
        if name == "schedule_retry":
            # The call as the worker made it, before any fault: a read, no checkpoint.
            self.world.checker.on_retry_call(args, self.inner.job_table.get(job_id))
        if name in OBSERVED:
            op = self._observed(name, op, job_id, args)
        try:
            result = await self._tx(name, True, op)
        except JobError as exc:
            self.world.trace.emit("jobs", f"tx.{name}", job=job_id, by=who,
                                  refused=type(exc).__name__)
            raise
        if isinstance(result, LeasedJob):
            self.world.trace.emit("jobs", f"tx.{name}", job=result.id, by=who,
                                  state=result.state, fence=result.fence)
            if name == "claim_one":
                self.claimed = (result.id, result.fence)
        elif name == "claim_one":
            self.world.trace.emit("jobs", "tx.claim_one", job=None, by=who)
        return result


    def _observed(self, name: str, op: Callable[[], Awaitable[Any]], job_id: Any,
                  args: tuple[Any, ...]) -> Callable[[], Awaitable[Any]]:
        """`op`, with the job as its transaction found it handed to the checker.

        The memory store reads, decides and writes right after its gate hook
        (`runtime.adapters.memory.gate`), so the job read in the hook is the one
        the decision saw. Reading adds no checkpoint: traces stay unchanged."""
        store, checker = self.inner, self.world.checker

        async def observed() -> Any:
            outer = BEFORE_APPLY.get()
            seen: list[LeasedJob | None] = []

            def hook() -> None:
                if outer is not None:
                    outer()
                seen.append(store.job_table.get(job_id))

            token = BEFORE_APPLY.set(hook)
            try:
                result = await op()
            except Exception as exc:
                if seen:
                    checker.on_job_decision(name, args, seen[0], None, exc)
                raise
            finally:
                BEFORE_APPLY.reset(token)
            if seen:
                checker.on_job_decision(name, args, seen[0], result, None)
            return result

        return observed


OBSERVED = ("renew", "reserve_model_call", "stage", "schedule_retry", "fail", "exhaust",
            "reprocess")
"""Transactions whose decision the checker re-judges from the job they found."""


def _read_method(name: str) -> Callable[..., Awaitable[Any]]:
    async def method(self: SimJobStore, *args: Any, **kwargs: Any) -> Any:
        inner = getattr(self.inner, name)
        return await self._tx(name, False, lambda: inner(*args, **kwargs))

    method.__name__ = name
    return method


def _write_method(name: str) -> Callable[..., Awaitable[Any]]:
    async def method(self: SimJobStore, *args: Any, **kwargs: Any) -> Any:
        inner = getattr(self.inner, name)
        job_id = args[0] if args and isinstance(args[0], UUID) else None
        return await self._write(name, lambda: inner(*args, **kwargs), job_id, args)

    method.__name__ = name
    return method


for _name in JOB_READS:
    setattr(SimJobStore, _name, _read_method(_name))
for _name in JOB_WRITES:
    setattr(SimJobStore, _name, _write_method(_name))
