"""Scenario `bad_input`: a buggy client beside an ordinary leased-job world and
an ordinary service world. Two leased-job workers drain the jobs an evidence
producer receives, and one service worker submits and reconciles the attempts a
requester prepares; meanwhile the client sends what no honest writer does,
each value just past the bound the record or the store admits: an evidence
delivery with an empty workspace (decoded from its JSON form), an
interpretation record numbered 0 or under fence -1 (from a JSON export), stage and
close calls under fence -1 (the client's "no fence") carrying usage, an
attempt record with its binding or request missing, a tool or capability
binding with one of its names empty, and an attempt event that
names interpretation 0 (interpretations count from 1), a job policy with a
negative retry base, an acknowledged job sent again under a newer or older model
version, and a cancel-settle of an
attempt it has just prepared (so likely never sent) on a lookup. A lookup proves
no cancellation in any state, so that settle must be refused whether or not the
service worker sent the attempt first: the race that let the earlier
containment and no-effect settles be accepted (swarm seed 249) cannot arise;
and a SUCCEEDED settle with a forged result, on a lookup that found no job, of an
open attempt the provider acknowledged. Every such call must be
refused with a clear error and leave no record; the ordinary work goes on
(seed 004 "Durable states", "Alpha.2 accounting"; seed 000 "Service job
attempts")."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import anyio
from pydantic import TypeAdapter, ValidationError

from runtime.errors import LedgerUnavailable
from runtime.jobs import EvidenceRecord
from runtime.jobs import models as job_models
from runtime.jobs.models import (
    AttemptFailure,
    EventKind,
    Interpretation,
    JobState,
    StagedResult,
    Usage,
)
from runtime.service import (
    AttemptOwner,
    ServiceError,
    ServiceJobAttempt,
    ServiceState,
    cancel,
    new_attempt,
    prepare,
)
from runtime.service.models import Evidence, EvidenceKind, ExecutionBinding, ServiceOutcome
from sim.leased import MODEL_VERSION
from sim.processes import Process, supervise
from sim.scenarios import Scenario, leased_jobs, register, service
from sim.scenarios.leased_jobs import Producer, work
from sim.scenarios.service import BINDING, Requester, context, serve
from sim.world import World

CLIENT = "client"
"""The buggy client: a process of its own (the service store is reached through one)."""
NO_FENCE = -1
"""What the client sends as the fence of an attempt it never claimed."""
HOSTILE_OWNER = "client-1"
BINDING_RECORD: TypeAdapter[ExecutionBinding] = TypeAdapter(ExecutionBinding)
MISSING = ("binding", "request")
"""Fields an attempt record arrives without (the digest filler needs both)."""


def emit(world: World, target: str, expect: str, exc: BaseException | None,
         fields: tuple[str, ...] = ()) -> None:
    """One bad call and how it was answered, for the checker (`sim.input_checks`).

    `expect` is what a clear refusal is: `invalid` (a validation error naming
    `fields`) or `refused` (any error: a validation error or the store's own)."""
    named: list[str] = []
    if isinstance(exc, ValidationError):
        named = sorted({str(part) for err in exc.errors() for part in err["loc"]})
    world.trace.emit(CLIENT, "bad_input.call", target=target, expect=expect,
                     outcome="accepted" if exc is None else type(exc).__name__,
                     fields=list(fields), named=named)


def decode_error(decode: Callable[[Any], object], raw: Any) -> BaseException | None:
    """The error a client's decode of `raw` raised, or None when the bad record was
    accepted."""
    try:
        decode(raw)
    except Exception as exc:  # judged by the checker (`sim.input_checks`)
        return exc
    return None


async def bad_jobs_call(world: World) -> None:
    """A stage or close of a job under fence -1, on the client's own connection to the
    job store (outside the workers' seam), each carrying usage it never got."""
    store, rng, now = world.jobs, world.streams.actors, world.clock.now()
    jobs = list(store.job_table.values())
    if not jobs:
        return
    job = rng.choice(jobs)
    usage = Usage(input_tokens=rng.randint(1, 50), output_tokens=rng.randint(1, 50))
    kind = rng.choice(("stage", "fail", "schedule_retry"))
    failure = AttemptFailure(reason="the client gave up", usage=usage)
    error: BaseException | None = None
    try:
        if kind == "stage":
            result = StagedResult(bundle={"facts": []}, usage=usage)
            await store.stage(job.id, NO_FENCE, HOSTILE_OWNER, MODEL_VERSION, result, now)
        elif kind == "fail":
            await store.fail(job.id, NO_FENCE, HOSTILE_OWNER, failure, now)
        else:
            await store.schedule_retry(job.id, NO_FENCE, HOSTILE_OWNER, now, failure, now)
    except Exception as exc:  # judged by the checker: any clear error refuses it
        error = exc
    emit(world, f"jobs.{kind}", "refused", error)


def bad_evidence(world: World) -> None:
    """An evidence delivery from the producer's JSON outbox with an empty workspace."""
    raw = json.dumps({"id": str(world.entropy.new_id()), "workspace": "",
                      "payload": "subject: value", "received_at": world.clock.now().isoformat()})
    error = decode_error(EvidenceRecord.model_validate_json, raw)
    emit(world, "evidence.decode", "invalid", error, ("workspace",))


def bad_interpretation(world: World, n: int) -> None:
    """An interpretation record from a client's export numbered 0 (odd rounds) or under
    fence -1 (even rounds): neither was ever staged. No draw of its own (ids from `n`)."""
    field = "number" if n % 2 else "fence"
    raw = json.dumps({"job_id": str(UUID(int=n)), "number": 0 if field == "number" else 1,
                      "fence": NO_FENCE if field == "fence" else 1,
                      "model_version": MODEL_VERSION, "state": JobState.PUBLISHED.value,
                      "bundle": {"facts": []}, "created_at": world.clock.now().isoformat()})
    error = decode_error(Interpretation.model_validate_json, raw)
    emit(world, "interpretation.decode", "invalid", error, (field,))


def bad_attempt_record(world: World, n: int) -> None:
    """An attempt record from the requester's outbox without its binding or request."""
    rng = world.streams.actors
    good = new_attempt(world.entropy.new_id(), owner=AttemptOwner(job=f"bad-{n}"),
                       idempotency_key=f"bad-record-{n}", generation=0,
                       request={"op": "render", "item": n}, binding=BINDING,
                       now=world.clock.now())
    field = rng.choice(MISSING)
    data = {k: v for k, v in good.model_dump().items() if k not in (field, "request_digest")}
    error = decode_error(ServiceJobAttempt.model_validate, data)
    emit(world, "attempt.decode", "invalid", error, (field,))


TOOL_BINDING = {"kind": "tool", "spell": "render", "resolution_lock": "lock-1",
                "tool_profile": "tools-1", "executor_profile": "tomb-1"}
"""A direct-tool binding as the requester's outbox holds it (every name non-empty)."""
BINDINGS = (TOOL_BINDING, {"kind": "capability", **BINDING.model_dump(exclude={"kind"})})


def bad_bindings(world: World, n: int) -> None:
    """Binding records from the requester's outbox, each with one name emptied: a tool
    binding in odd rounds, a capability binding in even ones, every name of it in turn
    (no draw). An empty name binds no implementation, so each must fail validation."""
    raw = BINDINGS[(n + 1) % 2]
    for field in (k for k in raw if k != "kind"):
        error = decode_error(BINDING_RECORD.validate_json, json.dumps({**raw, field: ""}))
        emit(world, f"binding.decode.{raw['kind']}", "invalid", error, (field,))


def bad_attempt_event(world: World, n: int) -> None:
    """An attempt event from the client's copy of a job's log that names interpretation
    0 (the first interpretation is 1). Read through the module at call time, so a
    break may lower the model's bound."""
    raw = json.dumps({"job_id": str(UUID(int=n)), "index": 0, "kind": EventKind.STARTED.value,
                      "fence": 0, "worker": HOSTILE_OWNER, "interpretation": 0,
                      "at": world.clock.now().isoformat()})
    error = decode_error(job_models.AttemptEvent.model_validate_json, raw)
    emit(world, "attempt_event.decode", "invalid", error, ("interpretation",))


def bad_policy(world: World, n: int) -> None:
    """A job policy from the client's configuration with a negative retry base (-0.25,
    -0.5 or -0.75 by round, no draw): a backoff shorter than none would schedule a retry
    before the failure that caused it. Read through the module at call time, so a break
    may lower the model's bound."""
    raw = json.dumps({"retry_base_s": -0.25 * (1 + n % 3)})
    error = decode_error(job_models.JobPolicy.model_validate_json, raw)
    emit(world, "job_policy.decode", "invalid", error, ("retry_base_s",))


async def bad_version(world: World, n: int) -> None:
    """A receipt of an acknowledged job sent again under another model version (a newer
    one in odd rounds, an older one in even rounds, the job picked by round: no draw):
    the same job id for other work, so it must be refused (JobConflict) whichever way
    the version moved. Judged by `receipt_idempotent` as a `version` receipt."""
    producer = world.actors.get("producer")
    if not isinstance(producer, Producer) or not producer.received:
        return
    evidence, job = producer.received[n % len(producer.received)]
    version = f"{MODEL_VERSION}-next" if n % 2 else MODEL_VERSION[:-1] + "0"
    await producer.receipt("version", evidence, job.model_copy(update={"model_version": version}))


async def bad_cancel(world: World, proc: Process, n: int) -> None:
    """Prepare a fresh attempt, settle it CANCELLED at once on a lookup, then cancel it
    properly. Only proof that it was never submitted cancels a PREPARED attempt, and
    only containment or no effect a sent one: a lookup is refused in every state, so
    the answer never depends on whether the service worker sent it first."""
    ctx = context(world, proc)
    attempt = new_attempt(world.entropy.new_id(), owner=AttemptOwner(job=f"client-{n}"),
                          idempotency_key=f"client-key-{n}", generation=0,
                          request={"op": "render", "item": 1000 + n}, binding=BINDING,
                          now=world.clock.now())
    try:
        stored = await prepare(ctx, attempt)
    except (LedgerUnavailable, ServiceError):
        return
    kind = EvidenceKind.LOOKUP_FOUND
    evidence = Evidence(kind=kind, at=world.clock.now(), transmission=stored.transmissions)
    error: BaseException | None = None
    try:
        await ctx.store.settle(stored.id, ServiceOutcome(state=ServiceState.CANCELLED),
                               evidence, world.clock.now())
    except Exception as exc:
        error = exc
    if not isinstance(error, LedgerUnavailable):
        emit(world, f"service.settle.{kind.value}", "refused", error)
    with contextlib.suppress(LedgerUnavailable, ServiceError):
        await cancel(ctx, stored.id)  # else the service worker sends it as any other


async def bad_success(world: World, proc: Process, n: int) -> None:
    """Settle an open, acknowledged attempt SUCCEEDED with a forged result on a lookup
    that found no job: only a lookup that found the acknowledged job proves success, and
    a forged result conflicts with any terminal one, so the settle is refused whatever
    the service worker did to the attempt meanwhile."""
    ctx = context(world, proc)
    try:
        batch = await ctx.store.open_attempts(None, 50)
    except LedgerUnavailable:
        return
    acknowledged = [a for a in batch if a.provider_job_id is not None]
    if not acknowledged:
        return
    target = world.streams.actors.choice(acknowledged)
    kind = EvidenceKind.LOOKUP_ABSENT
    evidence = Evidence(kind=kind, at=world.clock.now(), transmission=target.transmissions)
    forged = ServiceOutcome(state=ServiceState.SUCCEEDED, result={"forged": n})
    error: BaseException | None = None
    try:
        await ctx.store.settle(target.id, forged, evidence, world.clock.now())
    except Exception as exc:
        error = exc
    if not isinstance(error, LedgerUnavailable):
        emit(world, f"service.settle.{kind.value}", "refused", error)


@dataclass
class ClientState:
    """Outlives the client's incarnations: how many rounds it began, and whether it
    must stop (heal) and is between the calls of a round."""

    rounds: int = 0
    stop: bool = False
    busy: bool = False


async def client(world: World, proc: Process, state: ClientState) -> None:
    """The buggy client's loop: one bad call of each kind now and then, until heal."""
    rng = world.streams.actors
    while not state.stop:
        await anyio.sleep(round(rng.uniform(4.0, 15.0), 3))
        if state.stop:
            return
        state.rounds += 1
        state.busy = True
        try:
            bad_evidence(world)
            bad_interpretation(world, state.rounds)
            bad_attempt_record(world, state.rounds)
            bad_attempt_event(world, state.rounds)
            bad_policy(world, state.rounds)
            bad_bindings(world, state.rounds)
            await bad_jobs_call(world)
            await bad_version(world, state.rounds)
            await bad_cancel(world, proc, state.rounds)
            await bad_success(world, proc, state.rounds)
        finally:
            state.busy = False


async def drive(world: World) -> None:
    world.provider.configure(world.streams.workload)
    registry: dict[str, Process] = {}
    for name in leased_jobs.WORKERS[:2]:
        world.spawn(supervise, world, name, lambda proc: work(world, proc))
    world.spawn(supervise, world, service.SERVICES[0], lambda proc: serve(world, proc),
                registry)
    state = ClientState()
    world.actors[CLIENT] = state
    world.spawn(supervise, world, CLIENT, lambda proc: client(world, proc, state))
    producer = Producer(world)
    world.actors["producer"] = producer
    requester = Requester(world, registry)
    world.actors["requester"] = requester
    rng = world.streams.workload
    async with anyio.create_task_group() as tg:
        tg.start_soon(producer.run, rng.randint(4, 8))
        await requester.run(rng.randint(3, 6))
        await anyio.sleep(150.0)  # faults stay on while the workers catch up
        tg.cancel_scope.cancel()


async def heal(world: World) -> None:
    """Faults are off: the client stops after its round, the ordinary work drains (jobs,
    then attempts)."""
    state = world.actors.get(CLIENT)
    if isinstance(state, ClientState):
        state.stop = True
        while state.busy:
            await anyio.sleep(1.0)
    await leased_jobs.heal(world)
    await service.heal(world)


BAD_INPUT = register(Scenario("bad_input", " ".join((__doc__ or "").split()), drive, heal,
                              vessel=False))
