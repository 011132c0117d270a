"""Scenarios that hammer recovery itself.

- `crashloop`: every pattern under far more crashes than any profile draws,
  at catalogued points (startup reconciliation and shutdown included) and at
  random times, with short restart delays;
- `restart_storm`: an operator restarts the Vessel gracefully every few
  seconds while Runs of every pattern are in flight, some shutdowns crashing
  half way;
- `shutdown_in_flight`: every pattern while an operator cancels Runs and
  restarts the Vessel gracefully every few seconds; a publish often stays in
  flight before its job lands (after the canceller's probe) and its
  acknowledgement stays in flight after, so a shutdown cancels publishers
  (relays, request handlers) between a late job's landing and its
  acknowledgement: each must still fence that job itself;
- `misfiled_stasis`: consent and delegate Runs under frequent crashes while a
  faulty storage layer misdirects some checkpoint writes: the first pending
  snapshot names another Run (the owner binding untouched). Startup must not
  park such a window, and a resumed hop fails it as stasis lost;
- `degraded_startup`: Runs of every pattern under frequent crashes, some boots
  dying right after a worker took a job (before its claim), while a startup
  sometimes sees a QUEUED Run's job active without a start time or its
  delivery row out of step with it. Startup must degrade (the strict profile
  refuses, a later boot recovers) instead of fencing a job it cannot place or
  passing the row as clean;
- `crowded`: more Runs than one recovery page holds wait in one status at once:
  a burst of consent Runs parks while the approver is away, then a burst of
  echo Runs waits QUEUED behind a closed pre-claim gate while relay passes go
  by, and the Vessel restarts (gracefully or by a crash) with them all still
  waiting, so startup reconciliation and the relays page past the first page;
  a few claims stay stuck past the retry budget, so their jobs fail behind
  QUEUED Runs that recovery must rotate;
- `startup_debts`: Runs of every pattern under frequent crashes while most terminal
  Steps a startup appends fail (FaultKind.STARTUP_STEP_FAIL: its evidence repairs, the
  Steps of the Runs it fails or cancels), so startups owe that evidence to their relays;
  at the end the live boot dies between a Run's terminal truth and its terminal Step,
  so the last startup before heal finds that debt and, failing to pay it, must hand it
  to its relay, which pays it while the boot lives (nobody else would: no lease, and
  no later startup);
- `relay_bugs`: Runs of every pattern while the maintenance relay's own loop
  often fails past its per-step guards (FaultKind.RELAY_BUG, most passes of a
  boot in a row), so the lifespan supervisor restarts it again and again, its
  backoff doubling up to the cap, and the relays must still recover what the
  faults left behind.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any
from uuid import UUID, uuid5

import anyio

from runtime.errors import ProcessCrashed
from runtime.events.repair import TERMINAL_STEP_KINDS
from runtime.models import CheckpointRecord, Intent, RunStatus, Step
from runtime.mutation import DrainTimeout, pause_queues
from runtime.recovery.pages import PAGE_SIZE
from runtime.seams import JobInfo
from sim.faults.options import FaultOptions
from sim.scenarios import Scenario, register
from sim.scenarios.client import Client, Submit
from sim.scenarios.people import Approver, Operator
from sim.scenarios.waits import content, heal
from sim.scenarios.workload import submit_stream
from sim.world import World

ALL_PATTERNS = ("echo", "two_step", "consent_gate", "delegate", "hardware", "effectful")


def _crashy(options: FaultOptions) -> FaultOptions:
    return options.model_copy(update={
        "crash_per_point_hit": max(options.crash_per_point_hit, 0.08),
        "crash_per_boot": max(options.crash_per_boot, 0.8),
        "random_crash_window_s": 40.0,
        "max_crashes": max(options.max_crashes, 25),
        "restart_delay_s": (0.5, 4.0),
    })


def _doubtful(options: FaultOptions) -> FaultOptions:
    return _crashy(options).model_copy(update={
        "start_unrecorded_per_probe": max(options.start_unrecorded_per_probe, 0.5),
        "delivery_drift_per_read": max(options.delivery_drift_per_read, 0.1),
        "max_startup_faults": max(options.max_startup_faults, 3),
    })


def _stuck_claims(options: FaultOptions) -> FaultOptions:
    """A few claims stuck past the retry budget: their jobs fail behind QUEUED Runs,
    which the relay (or the next startup) must rotate and publish again."""
    return options.model_copy(update={
        "claim_stuck_per_claim": max(options.claim_stuck_per_claim, 0.02),
    })


def _stormy(options: FaultOptions) -> FaultOptions:
    return options.model_copy(update={
        "crash_per_point_hit": max(options.crash_per_point_hit, 0.02),
        "max_crashes": max(options.max_crashes, 8),
        "restart_delay_s": (0.2, 2.0),
    })


def _buggy_relays(options: FaultOptions) -> FaultOptions:
    """Most relay passes fail past their guards: a boot's relay fails several times
    in a row, so its supervisor's backoff doubles up to the 5 s cap."""
    return options.model_copy(update={
        "relay_bug_per_pass": max(options.relay_bug_per_pass, 0.6),
    })


def _owing_startups(options: FaultOptions) -> FaultOptions:
    """Most terminal Steps a startup appends fail; never with stuck claims (both kinds
    draw from the injector's side stream)."""
    return _crashy(options).model_copy(update={
        "startup_step_fail_per_append": max(options.startup_step_fail_per_append, 0.7),
    })


async def _workload(world: World, restarts: bool) -> None:
    approver = Approver(world)
    world.actors["approver"] = approver
    async with anyio.create_task_group() as tg:
        tg.start_soon(approver.run)
        tg.start_soon(Operator(world, share=0.15).run, anyio.current_time() + 300.0)
        if restarts:
            tg.start_soon(_restarter, world, anyio.current_time() + 300.0)
        await submit_stream(world, ALL_PATTERNS, content, count=(15, 35))
        tg.cancel_scope.cancel()


async def _restarter(world: World, until: float) -> None:
    rng = world.streams.actors
    while anyio.current_time() < until:
        await anyio.sleep(round(rng.uniform(5.0, 25.0), 3))
        boot = world.live_boot
        if boot is not None:
            world.trace.emit("operator", "restart", boot=boot.number)
            boot.stop()


def _acks_in_flight(options: FaultOptions) -> FaultOptions:
    """Publishes in flight on both sides of their landing: before it (a lost
    acknowledgement's publish lands up to 30 s later, after a cancellation may have
    committed) and after it (the acknowledgement, or its loss, comes back up to 30 s
    later), so a graceful shutdown can cancel the publisher between the two (seed 000,
    "Cancellation, mutation, and recovery": the late job's publisher fences it)."""
    return _stormy(options).model_copy(update={
        "ack_lost_per_publish": max(options.ack_lost_per_publish, 0.3),
        "publish_in_flight_s": 30.0,
        "ack_in_flight_per_publish": max(options.ack_in_flight_per_publish, 0.5),
        "ack_in_flight_s": 30.0,
    })


async def _shutdown_in_flight(world: World) -> None:
    approver = Approver(world)
    world.actors["approver"] = approver
    async with anyio.create_task_group() as tg:
        tg.start_soon(approver.run)
        operator = Operator(world, share=0.3).register()
        tg.start_soon(operator.run, anyio.current_time() + 300.0)
        tg.start_soon(_queued_canceller, world, operator, anyio.current_time() + 300.0)
        tg.start_soon(_restarter, world, anyio.current_time() + 300.0)
        await submit_stream(world, ALL_PATTERNS, content, count=(15, 35))
        tg.cancel_scope.cancel()


async def _queued_canceller(world: World, operator: Operator, until: float) -> None:
    """Every few seconds cancel a QUEUED Run: the Runs whose hop publish may still be in
    flight, so its job lands after the canceller's probe (a late job)."""
    rng = world.streams.actors
    while anyio.current_time() < until:
        await anyio.sleep(round(rng.uniform(1.0, 6.0), 3))
        runs = sorted(world.ledger.run_table.values(), key=lambda r: (r.created_at, r.id))
        queued = [r.id for r in runs if r.status is RunStatus.QUEUED]
        if queued:
            await operator.cancel(rng.choice(queued))


async def _crashloop(world: World) -> None:
    await _workload(world, restarts=False)


async def _storm(world: World) -> None:
    await _workload(world, restarts=True)


async def _misfiled(world: World) -> None:
    approver = Approver(world)
    world.actors["approver"] = approver
    _misdirect_checkpoints(world)
    async with anyio.create_task_group() as tg:
        tg.start_soon(approver.run)
        await submit_stream(world, ("consent_gate", "delegate"), content, count=(10, 20))
        tg.cancel_scope.cancel()


async def _degraded(world: World) -> None:
    _die_holding_jobs(world, deaths=4)
    await _workload(world, restarts=False)


def _die_holding_jobs(world: World, deaths: int) -> None:
    """Some boots die right after a worker dequeued a job, before its claim: the next
    startup finds the Run QUEUED and its job active (at most `deaths` times)."""
    broker = world.broker
    dequeue = broker.dequeue
    rng = world.streams.actors
    left = [deaths]

    async def dequeue_then_die(queue: str, boot_id: str | None = None) -> JobInfo | None:
        job = await dequeue(queue, boot_id)
        boot = world.live_boot
        if job is not None and boot is not None and left[0] > 0 \
                and not world.injector.healed and rng.random() < 0.2:
            left[0] -= 1
            boot.crash(f"died holding job {job.key}")
        return job

    broker.dequeue = dequeue_then_die  # type: ignore[method-assign]


CROWD = (PAGE_SIZE + 3, PAGE_SIZE + 15)
"""Runs per burst: more than one page of recovery, whatever a few refused admissions cost."""


async def _crowded(world: World) -> None:
    rng = world.streams.workload
    approver = Approver(world)
    world.actors["approver"] = approver
    client = Client(world, world.streams.actors)
    world.actors["client"] = client
    async with anyio.create_task_group() as tg:
        tg.start_soon(Operator(world, share=0.1).run, anyio.current_time() + 120.0)
        await _burst(world, client, "consent_gate", rng.randint(*CROWD), "c")
        await anyio.sleep(round(rng.uniform(8.0, 20.0), 3))  # relay passes page the parked
        for attempt in range(2):  # a crash that takes the paused boot spoils the crowd
            if await _crowd_queued(world, client, f"q{attempt}-"):
                break
        await anyio.sleep(round(rng.uniform(30.0, 60.0), 3))  # relays page the parked still
        tg.start_soon(approver.run)
        await anyio.sleep(60.0)
        await client.settle_debts()
        tg.cancel_scope.cancel()


async def _crowd_queued(world: World, client: Client, tag: str) -> bool:
    """A burst of echo Runs behind the live boot's closed pre-claim gate, then that
    boot restarted while they all wait QUEUED; False when the boot died meanwhile."""
    rng = world.streams.workload
    boot = await world.wait_live()
    try:
        async with pause_queues(boot.worker, drain_timeout_s=10.0):
            await _burst(world, client, "echo", rng.randint(*CROWD), tag)
            await anyio.sleep(round(rng.uniform(25.0, 40.0), 3))  # relay passes page them
            if boot is not world.live_boot:
                return False
            world.trace.emit("operator", "restart", boot=boot.number)
            if rng.random() < 0.5:
                boot.stop()
            else:
                boot.crash("operator kill while crowded")
    except DrainTimeout:
        world.trace.emit("operator", "pause.drain_timeout", boot=boot.number)
    return True


async def _burst(world: World, client: Client, pattern: str, count: int, tag: str) -> None:
    """`count` keyed Runs of `pattern` a few milliseconds apart; a lost outcome is owed."""
    rng = world.streams.workload
    for i in range(count):
        await anyio.sleep(round(rng.uniform(0.005, 0.05), 3))
        await world.wait_live()
        intent = Intent(pattern=pattern, prompt=f"crowd-{tag}{i}", source="sim",
                        sigil=rng.choice(("alice", "bob")), scopes=("runs:write",),
                        content={"rounds": 1, "approvals": 1} if pattern == "consent_gate"
                        else {"n": i},
                        idempotency_key=f"crowd-{tag}{i}")
        await client.submit(Submit(intent))


def _misdirect_checkpoints(world: World) -> None:
    """A faulty storage layer: some checkpoint writes land with another Run's id
    inside their first pending snapshot (the owner binding columns untouched)."""
    ledger = world.ledger
    save = ledger.save_checkpoint
    rng = world.streams.actors

    async def misdirected(record: CheckpointRecord) -> bool:
        history = [dict(snap) for snap in record.document.get("history", [])]
        pending = [snap for snap in history if snap.get("status") == "pending"]
        if pending and rng.random() < 0.5:
            pending[0]["run_id"] = str(uuid5(record.run_id, "misfiled"))
            record = record.model_copy(update={"document": {**record.document,
                                                            "history": history}})
            world.trace.emit("storage", "stasis.misfiled", run=str(record.run_id))
        return await save(record)

    ledger.save_checkpoint = misdirected  # type: ignore[method-assign]


async def _owed_at_startup(world: World) -> None:
    await _workload(world, restarts=False)
    died = _die_before_evidence(world)
    client = world.actors["client"]
    assert isinstance(client, Client)
    with anyio.move_on_after(600.0):
        for i in range(30):  # one echo Run at a time until the live boot died before its Step
            await world.wait_live()
            intent = Intent(pattern="echo", prompt=f"owed-{i}", source="sim", sigil="alice",
                            scopes=("runs:write",), content={"n": i},
                            idempotency_key=f"owed-{i}")
            await client.submit(Submit(intent))
            with anyio.move_on_after(20.0):
                await died.wait()
            if died.is_set():
                break
    await world.wait_live()  # the last startup before heal: it found the debt


def _die_before_evidence(world: World) -> anyio.Event:
    """Once: the serving boot dies right before it appends a terminal Step (its Run's
    terminal truth committed), so the next startup finds that evidence owed."""
    ledger = world.ledger
    append_step, append_steps = ledger.append_step, ledger.append_steps
    died = anyio.Event()

    def die_at(kinds: Iterable[str]) -> None:
        boot = world.live_boot
        if died.is_set() or boot is None or boot.lifespan.status.phase != "ready" \
                or world.injector.healed or not any(k in TERMINAL_STEP_KINDS for k in kinds):
            return
        died.set()
        boot.crash("died before a terminal Step")
        raise ProcessCrashed(boot.id)

    async def step(run_id: UUID, seq: int, kind: str, data: dict[str, Any],
                   now: datetime) -> Step:
        die_at((kind,))
        return await append_step(run_id, seq, kind, data, now)

    async def steps(run_id: UUID, seq: int, items: Any, now: datetime) -> list[Step]:
        die_at(kind for kind, _ in items)
        return await append_steps(run_id, seq, items, now)

    ledger.append_step = step  # type: ignore[method-assign]
    ledger.append_steps = steps  # type: ignore[method-assign]
    return died


def _describe(name: str) -> str:
    for part in (__doc__ or "").split("- `")[1:]:
        if part.startswith(name + "`"):
            return " ".join(part.split(":", 1)[1].split()).rstrip(";.")
    return name


CRASHLOOP = register(Scenario("crashloop", _describe("crashloop"), _crashloop, heal, _crashy))
RESTART_STORM = register(
    Scenario("restart_storm", _describe("restart_storm"), _storm, heal, _stormy)
)
def _requests_cancelled_at_stop(world: World) -> None:
    world.cancel_requests_at_stop = True  # handlers end (fences run) before the lifespan


SHUTDOWN_IN_FLIGHT = register(Scenario(
    "shutdown_in_flight", _describe("shutdown_in_flight"), _shutdown_in_flight, heal,
    _acks_in_flight, setup=_requests_cancelled_at_stop,
))
DEGRADED_STARTUP = register(
    Scenario("degraded_startup", _describe("degraded_startup"), _degraded, heal, _doubtful)
)
CROWDED = register(Scenario("crowded", _describe("crowded"), _crowded, heal, _stuck_claims))
RELAY_BUGS = register(
    Scenario("relay_bugs", _describe("relay_bugs"), _crashloop, heal, _buggy_relays)
)
STARTUP_DEBTS = register(Scenario(
    "startup_debts", _describe("startup_debts"), _owed_at_startup, heal, _owing_startups,
))
MISFILED_STASIS = register(
    Scenario("misfiled_stasis", _describe("misfiled_stasis"), _misfiled, heal, _crashy)
)
