"""Scenario `service`: ServiceJobAttempt@1 records prepared by a requester
(with exact replays, some in another key order, and changed payloads under
a used key), submitted and
reconciled by two service worker processes against a simulated provider,
while an operator cancels some (another, at once, half of those still
submitting); the provider duplicates submissions, lies in
lookups for a while, loses acknowledgements, times out and refuses, and
workers crash between the CAS to SUBMITTING and the provider id being
persisted, there at the catalogued `service.submitted_before_ack`. Each
incarnation of a worker, and every fifth of its passes, reconciles through
`reconcile_open` in pages of three (the startup and relay pass); a busy
provider refuses some first transmissions slowly, often after another worker
re-submitted on proof;
some attempts bind a one-letter interface; some records reach the requester
with a digest sealed over another request (refused before they are prepared)
(seed 000, "Service job attempts")."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast
from uuid import UUID

import anyio
from pydantic import ValidationError

from runtime.errors import LedgerUnavailable
from runtime.service import (
    AttemptOwner,
    CapabilityBinding,
    ServiceAttemptStore,
    ServiceContext,
    ServiceError,
    ServiceJobAttempt,
    ServiceState,
    cancel,
    new_attempt,
    prepare,
    reconcile,
    submit,
)
from runtime.service import attempts as service_attempts
from sim.processes import Process, ProcessFaults, supervise
from sim.provider import SimDriver, SimServiceStore
from sim.scenarios import Scenario, register
from sim.world import Unavailable, World

SERVICES = ("svc-a", "svc-b")
BINDING = CapabilityBinding(
    interface="render", profile_revision="r1", profile_digest="sha256:r1", operation="render",
    driver_revision="d1", dialect_revision="v1",
)
TERSE = CapabilityBinding(
    interface="t", profile_revision="r1", profile_digest="sha256:t1", operation="t",
    driver_revision="d1", dialect_revision="v1",
)
"""A one-letter interface and operation: the shortest names a binding admits."""
HEAL_DEADLINE_S = 3600.0
OPEN_PAGE = 3
"""Page size of the `reconcile_open` passes: small, so a pass spans several pages."""
OPEN_EVERY = 5
"""Every this many passes of a worker go through `reconcile_open`."""
BUSY = 0.15
"""Share of first transmissions the provider refuses as busy, answering after 5-25 s."""
CORRUPT = 0.08
"""Share of requests whose record arrives sealed over another request."""

Registry = dict[str, Process]


def context(world: World, proc: Process) -> ServiceContext:
    return ServiceContext(
        store=cast(ServiceAttemptStore, SimServiceStore(world, proc)),
        driver=SimDriver(world, proc),
        clock=world.clock,
        faults=ProcessFaults(proc),
    )


async def serve(world: World, proc: Process) -> None:
    """A domain worker: submit prepared attempts, reconcile the rest, re-drive cancels."""
    ctx = context(world, proc)
    rng = world.streams.actors
    await open_pass(world, ctx, proc)  # what a (re)started worker does first
    passes = 0
    while True:
        await anyio.sleep(round(rng.uniform(2.0, 10.0), 3))
        passes += 1
        if passes % OPEN_EVERY == 0:
            await open_pass(world, ctx, proc)
        else:
            await reconcile_pass(world, ctx, proc)


async def open_pass(world: World, ctx: ServiceContext, proc: Process) -> None:
    """One `reconcile_open` pass; the checker judges a pass that completed."""
    before = {a.id for a in world.services.attempt_table.values() if not a.state.terminal}
    try:
        seen = await service_attempts.reconcile_open(ctx, OPEN_PAGE)
    except (ServiceError, LedgerUnavailable) as exc:
        world.trace.emit("service", "service.open_pass", process=proc.id,
                         outcome=type(exc).__name__)
        return
    world.trace.emit("service", "service.open_pass", process=proc.id, outcome="done",
                     visited=len(seen))
    world.checker.on_open_pass(proc.id, before, [a.id for a in seen])


async def reconcile_pass(world: World, ctx: ServiceContext, proc: Process) -> None:
    try:
        batch = await ctx.store.open_attempts(None, 500)
    except LedgerUnavailable:
        return
    for attempt in batch:
        if attempt.cancel_requested_at is not None:
            action = "cancel"
        elif attempt.state is ServiceState.PREPARED:
            action = "submit"
        else:
            action = "reconcile"
        try:
            if action == "cancel":
                after = await cancel(ctx, attempt.id)
            elif action == "submit":
                after = await submit(ctx, attempt.id)
            else:
                after = await reconcile(ctx, attempt.id)
            outcome = after.state.value
        except (ServiceError, LedgerUnavailable) as exc:
            outcome = type(exc).__name__
        world.trace.emit("service", "service.step", process=proc.id, attempt=attempt.id,
                         action=action, outcome=outcome)


def live(world: World, registry: Registry, rng: random.Random) -> Process | None:
    procs = [registry[n] for n in SERVICES if n in registry and registry[n].alive]
    return rng.choice(procs) if procs else None


@dataclass
class Requester:
    """Prepares attempts through a live service process; retries lost answers."""

    world: World
    registry: Registry
    owed: list[ServiceJobAttempt] = field(default_factory=list)

    def _attempt(self, i: int) -> ServiceJobAttempt:
        rng = self.world.streams.workload
        return new_attempt(
            self.world.entropy.new_id(),
            owner=AttemptOwner(job=f"job-{i}"),
            idempotency_key=f"svc-key-{i}",
            generation=0,
            request={"op": "render", "item": i, "size": rng.randint(1, 9)},
            binding=TERSE if rng.random() < 0.2 else BINDING,
            now=self.world.clock.now(),
        )

    def _again(self, prior: ServiceJobAttempt, changed: bool) -> ServiceJobAttempt:
        request = dict(prior.request)
        if changed:
            request["size"] = int(request["size"]) + 10
        elif self.world.streams.workload.random() < 0.75:
            # The same content serialised in another key order: still the same request.
            request = dict(reversed(list(request.items())))
        data = {**prior.model_dump(), "id": self.world.entropy.new_id(), "request": request,
                "request_digest": ""}
        return ServiceJobAttempt.model_validate(data)

    async def run(self, count: int) -> None:
        rng = self.world.streams.workload
        made: list[ServiceJobAttempt] = []
        for i in range(count):
            await anyio.sleep(round(rng.expovariate(1 / 6), 3))
            roll = rng.random()
            if made and roll < 0.15:
                attempt = self._again(rng.choice(made), changed=False)
            elif made and roll < 0.25:
                attempt = self._again(rng.choice(made), changed=True)
            else:
                attempt = self._attempt(i)
                made.append(attempt)
            if rng.random() < CORRUPT and not self.refuse_corrupt(attempt):
                continue
            await self.prepare(attempt)
            await self.settle(rounds=1)

    def refuse_corrupt(self, attempt: ServiceJobAttempt) -> bool:
        """The record of `attempt` arrives with its digest sealed over another request, or
        without its idempotency key: it
        must not validate (True: refused, the requester goes on with the true record).
        Should it validate, the requester believes it and prepares it instead."""
        request = {**attempt.request, "size": int(attempt.request["size"]) + 100}
        data = {**attempt.model_dump(), "request": request}
        if self.world.streams.workload.random() < 0.5:  # or its idempotency key lost
            data = {**attempt.model_dump(), "idempotency_key": ""}
        try:
            forged = ServiceJobAttempt.model_validate(data)
        except ValidationError:
            self.world.trace.emit("requester", "service.corrupt", key=attempt.idempotency_key,
                                  outcome="refused")
            return True
        self.world.trace.emit("requester", "service.corrupt", key=attempt.idempotency_key,
                              outcome="accepted")
        self.owed.append(forged)
        return False

    async def prepare(self, attempt: ServiceJobAttempt) -> None:
        world = self.world
        proc = live(world, self.registry, world.streams.actors)
        stored: ServiceJobAttempt | None = None
        try:
            if proc is None:
                raise Unavailable("no live service process")
            stored = await proc.call(lambda p: prepare(context(world, p), attempt))
            outcome = "prepared"
        except (Unavailable, LedgerUnavailable) as exc:
            outcome = type(exc).__name__
            self.owed.append(attempt)
        except ServiceError as exc:
            outcome = type(exc).__name__
        world.trace.emit("requester", "service.prepare", key=attempt.idempotency_key,
                         digest=attempt.request_digest, request=attempt.request,
                         outcome=outcome,
                         attempt=None if stored is None else stored.id)

    async def settle(self, rounds: int = 100) -> None:
        for _ in range(rounds):
            if not self.owed:
                return
            owed, self.owed = self.owed, []
            for attempt in owed:
                await self.prepare(attempt)
            if self.owed:
                await anyio.sleep(5.0)


def _canceller(
    world: World, attempt_id: UUID
) -> Callable[[Process], Awaitable[ServiceJobAttempt]]:
    async def request(proc: Process) -> ServiceJobAttempt:
        return await cancel(context(world, proc), attempt_id)

    return request


async def operator(world: World, registry: Registry) -> None:
    """Cancels a random open attempt now and then, through a live process."""
    rng = world.streams.actors
    while True:
        await anyio.sleep(round(rng.uniform(15.0, 60.0), 3))
        open_ = [a.id for a in world.services.attempt_table.values() if not a.state.terminal]
        if not open_ or rng.random() >= 0.35:
            continue
        await cancel_one(world, registry, rng.choice(open_))


async def cancel_one(world: World, registry: Registry, attempt_id: UUID) -> None:
    rng = world.streams.actors
    proc = live(world, registry, rng)
    try:
        if proc is None:
            raise Unavailable("no live service process")
        after = await proc.call(_canceller(world, attempt_id))
        outcome = after.state.value
    except (Unavailable, LedgerUnavailable, ServiceError) as exc:
        outcome = type(exc).__name__
    world.trace.emit("operator", "service.cancel", attempt=attempt_id, outcome=outcome)


async def hasty_operator(world: World, registry: Registry) -> None:
    """Cancels, once, half of the attempts still submitting without a provider job (a
    slow refusal is out): the provider holds nothing, so lookups can prove no effect."""
    seen: set[UUID] = set()
    while True:
        await anyio.sleep(3.0)
        for a in list(world.services.attempt_table.values()):
            if a.id in seen or a.state is not ServiceState.SUBMITTING or a.provider_job_id:
                continue
            seen.add(a.id)
            if world.streams.actors.random() < 0.5:
                await cancel_one(world, registry, a.id)


async def drive(world: World) -> None:
    world.provider.configure(world.streams.workload)
    world.provider.busy_share = BUSY
    registry: Registry = {}
    for name in SERVICES:
        world.spawn(supervise, world, name, lambda proc: serve(world, proc), registry)
    requester = Requester(world, registry)
    world.actors["requester"] = requester
    async with anyio.create_task_group() as tg:
        tg.start_soon(operator, world, registry)
        tg.start_soon(hasty_operator, world, registry)
        await requester.run(world.streams.workload.randint(8, 20))
        await anyio.sleep(200.0)  # faults stay on while the workers reconcile
        tg.cancel_scope.cancel()


def settled(world: World) -> bool:
    provider = world.provider
    for a in world.services.attempt_table.values():
        if a.state.terminal:
            continue
        if a.state is not ServiceState.INDETERMINATE:
            return False
        if provider.job_of(a.idempotency_key, a.provider_job_id) is not None:
            return False
    return True


async def heal(world: World) -> None:
    """Faults are off and lookups tell the truth: reconcile until nothing is left."""
    world.provider.heal()
    requester = world.actors.get("requester")
    if isinstance(requester, Requester):
        await requester.settle()
    deadline = anyio.current_time() + HEAL_DEADLINE_S
    while anyio.current_time() < deadline and not settled(world):
        await anyio.sleep(10.0)
    world.trace.emit("world", "drained", attempts=len(world.services.attempt_table),
                     done=settled(world))


SERVICE = register(Scenario("service", " ".join((__doc__ or "").split()), drive, heal,
                            vessel=False))
