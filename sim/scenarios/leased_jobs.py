"""Scenario `leased_jobs`: three leased-job worker processes call `run_once`
in loops for one authorised workspace against a simulated model, while an
evidence producer receives evidence with its job and an operator sometimes
reprocesses a published job; workers stall past their 90 s lease, results
arrive late from an old fence, model calls hang past the 45 s deadline or
lose their reply or run past a lease renewal, and workers crash mid-job; one
worker renews more often than the ledger's 20 s floor, a canary worker runs a
newer model than the jobs ask for (its attempts are handed back unspent), an
operator reprocesses a job whose processing ended at once while a late result
for it is in flight, and
some deliveries arrive with a digest that does not match their payload (the
record is refused and fetched again), are sent twice (from a JSON outbox),
name another workspace or a job id already taken, and some jobs allow a single
attempt (seed 004)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import cast
from uuid import UUID

import anyio
from pydantic import ValidationError

from runtime.errors import LedgerUnavailable
from runtime.jobs import (
    EventKind,
    EvidenceRecord,
    JobError,
    JobState,
    JobStore,
    LeasedJob,
    WorkerContext,
    new_job,
    run_once,
)
from runtime.jobs.models import JobPolicy, digest_text
from sim.leased import (
    CANARY_VERSION,
    MODEL_VERSION,
    Pace,
    SimJobStore,
    SimModelClient,
    worker_faults,
)
from sim.processes import Process, supervise
from sim.scenarios import Scenario, register
from sim.world import World

WORKSPACE = "ws-1"
WORKERS = ("worker-a", "worker-b", "worker-c")
EAGER = "worker-c"
"""Renews every 8 s: the ledger must ignore the renewals inside its 20 s floor."""
CANARY = "worker-next"
"""Runs CANARY_VERSION, rarely: every job it claims is of another model version."""
POLICIES = {EAGER: JobPolicy(renew_every_s=8.0)}
ENDED = (JobState.PUBLISHED, JobState.WAITING_ONTOLOGY, JobState.WAITING_IDENTITY,
         JobState.WAITING_REVIEW, JobState.FAILED, JobState.EXHAUSTED)
"""States whose processing ended: an operator may reprocess them."""
SINGLE = JobPolicy(max_attempts=1)
"""The policy of some jobs: one worker attempt, then exhausted."""
OTHER_WORKSPACE = "ws-2"
MISFILED = 0.1
"""Share of new evidence first offered with a job of another workspace."""
AGAIN = 0.1
"""Share of receipts the producer sends once more (at-least-once delivery)."""
REUSED = 0.05
"""Share of new evidence first offered under a job id already taken."""
CORRUPT = 0.15
"""Share of deliveries whose declared digest does not match the payload (about one
in two forged digests sorts below the true one, so a `>` test alone misses it)."""
NEEDS = ("ontology", "identity", "review")
HEAL_DEADLINE_S = 3600.0


def payload(rng: random.Random, i: int) -> str:
    """Evidence text: `subject: value` lines, sometimes a `needs:` line, sometimes
    far larger than the model's context (processing fails, the evidence stays)."""
    roll = rng.random()
    if roll < 0.08:
        return f"oversized-{i}: " + "x" * rng.randint(5000, 9000)
    lines = [f"subject-{i}-{k}: value-{rng.randint(0, 99)}" for k in range(rng.randint(1, 6))]
    if roll < 0.35:
        lines.append(f"needs: {rng.choice(NEEDS)}")
    return "\n".join(lines)


async def work(world: World, proc: Process, version: str | None = None,
               idle: tuple[float, float] = (1.0, 5.0), pace: Pace | None = None,
               store_type: type[SimJobStore] = SimJobStore) -> None:
    """One `vessel jobs work` process: claim, attempt, repeat; back off when idle
    (a canary backs off after every step). `pace` draws the model's call durations
    (sim.leased.SimModelClient), `store_type` is the process's JobStore seam."""
    store = store_type(world, proc)
    ctx = WorkerContext(
        store=cast(JobStore, store),
        model=SimModelClient(world, proc, version, pace),
        clock=world.clock,
        workspace=WORKSPACE,
        worker_id=proc.id,
        scopes=(WORKSPACE,),
        entropy=world.entropy,
        faults=worker_faults(proc),
        policy=POLICIES.get(proc.name, JobPolicy()),
    )
    rng = world.streams.actors
    while True:
        store.claimed = None
        job: LeasedJob | None = None
        try:
            job = await run_once(ctx)
            outcome = "idle" if job is None else job.state.value
            returned = True
        except (LedgerUnavailable, JobError) as exc:  # a supervisor would back off
            outcome, returned = type(exc).__name__, False
        claimed = store.claimed
        world.trace.emit(
            "worker", "jobs.step", worker=proc.id, returned=returned, outcome=outcome,
            claimed=None if claimed is None else [str(claimed[0]), claimed[1]],
        )
        if job is None or version is not None:
            await anyio.sleep(round(rng.uniform(*idle), 3))


@dataclass
class Producer:
    """Receives evidence with its job in one transaction; retries until acknowledged."""

    world: World
    owed: list[tuple[EvidenceRecord, LeasedJob]] = field(default_factory=list)
    received: list[tuple[EvidenceRecord, LeasedJob]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store = cast(JobStore, SimJobStore(self.world, None))

    async def run(self, count: int) -> None:
        world, rng = self.world, self.world.streams.workload
        for i in range(count):
            await anyio.sleep(round(rng.expovariate(1 / 8), 3))
            now = world.clock.now()
            text = payload(rng, i)
            if rng.random() < CORRUPT:
                self.refuse_corrupt(text)
            evidence = EvidenceRecord(
                id=world.entropy.new_id(), workspace=WORKSPACE, payload=text, received_at=now,
            )
            policy = SINGLE if i % 10 == 9 else JobPolicy()  # every tenth job
            job = new_job(world.entropy.new_id(), evidence, MODEL_VERSION, now, policy)
            roll = rng.random()
            if self.received and roll < REUSED:
                # A job id already taken, for this other evidence: refused, then a fresh id.
                _, taken = rng.choice(self.received)
                await self.receipt("reused", evidence, job.model_copy(update={"id": taken.id}))
            elif roll < REUSED + MISFILED:
                # The job names another workspace than its evidence: refused.
                await self.receipt("misfiled", evidence, job.model_copy(
                    update={"id": world.entropy.new_id(), "workspace": OTHER_WORKSPACE}))
            self.owed.append((evidence, job))
            await self.deliver()
            if self.received and REUSED + MISFILED <= roll < REUSED + MISFILED + AGAIN:
                # Sent again, from memory or from the producer's outbox (decoded afresh
                # from its JSON form: equal values, new objects).
                evidence, job = rng.choice(self.received)
                if rng.random() < 0.5:
                    evidence = EvidenceRecord.model_validate_json(evidence.model_dump_json())
                    job = LeasedJob.model_validate_json(job.model_dump_json())
                await self.receipt("again", evidence, job)

    async def receipt(self, kind: str, evidence: EvidenceRecord, job: LeasedJob) -> None:
        """One receipt outside the owed list: a repeat of an acknowledged one ("again"),
        or a job id reused for other work ("reused"); the checker judges the answer."""
        try:
            stored = await self.store.receive(evidence, job)
            outcome, got = "received", str(stored.id)
        except (LedgerUnavailable, JobError) as exc:
            outcome, got = type(exc).__name__, None
        self.world.trace.emit("producer", "evidence.receipt", kind=kind, evidence=evidence.id,
                              job=job.id, outcome=outcome, stored=got)

    def refuse_corrupt(self, text: str) -> None:
        """A delivery whose declared digest is not its payload's (truncated in transit):
        the record must not validate. Should it, the producer believes it and owes it."""
        world = self.world
        data = {"id": world.entropy.new_id(), "workspace": WORKSPACE, "payload": text[:-1],
                "digest": digest_text(text), "received_at": world.clock.now()}
        try:
            record = EvidenceRecord.model_validate(data)
        except ValidationError:
            world.trace.emit("producer", "evidence.corrupt", evidence=data["id"],
                             outcome="refused")
            return
        world.trace.emit("producer", "evidence.corrupt", evidence=record.id, outcome="accepted")
        self.owed.append((record, new_job(world.entropy.new_id(), record, MODEL_VERSION,
                                          record.received_at)))

    async def deliver(self) -> None:
        owed, self.owed = self.owed, []
        for evidence, job in owed:
            try:
                stored = await self.store.receive(evidence, job)
            except LedgerUnavailable as exc:
                self.owed.append((evidence, job))
                self.world.trace.emit("producer", "evidence.owed", evidence=evidence.id,
                                      error=type(exc).__name__)
                continue
            self.world.trace.emit("producer", "evidence.received", evidence=evidence.id,
                                  digest=evidence.digest, job=stored.id)
            self.received.append((evidence, job))

    async def settle(self) -> None:
        while self.owed:
            await self.deliver()
            if self.owed:
                await anyio.sleep(5.0)


async def reprocessor(world: World) -> None:
    """An operator asks now and then for another interpretation of a published job."""
    store = cast(JobStore, SimJobStore(world, None))
    rng = world.streams.actors
    while True:
        await anyio.sleep(round(rng.uniform(20.0, 60.0), 3))
        published = [j for j in world.jobs.job_table.values() if j.state is JobState.PUBLISHED]
        if not published or rng.random() >= 0.3:
            continue
        job = rng.choice(published)
        try:
            after = await store.reprocess(job.id, world.clock.now())
            outcome = f"interpretation {after.interpretation}"
        except (LedgerUnavailable, JobError) as exc:
            outcome = type(exc).__name__
        world.trace.emit("operator", "jobs.reprocess", job=job.id, outcome=outcome)


def late_result_pending(world: World, job: LeasedJob) -> bool:
    """An older fence of `job` holds a model reply it has not staged yet (a late result
    in flight), read from the model provider's books and the attempt log."""
    events = world.jobs.event_log.get(job.id, [])
    started = {(e.interpretation, e.call): e.fence for e in events
               if e.kind is EventKind.STARTED and e.call is not None}
    closed = {e.fence for e in events if e.kind in (EventKind.COMPLETED, EventKind.FAILED)}
    for (job_id, interpretation, call), record in world.model.calls.items():
        fence = started.get((interpretation, call))
        if job_id == job.id and record.outcome == "replied" and fence is not None \
                and fence != job.fence and fence not in closed:
            return True
    return False


async def eager_reprocessor(world: World) -> None:
    """An operator who reprocesses a job whose processing ended (staged, failed or
    exhausted) at once while an older fence's result
    is still in flight: the late result then meets a newer interpretation and a newer
    fence (its kept usage must stay labelled with the call that returned it)."""
    store = cast(JobStore, SimJobStore(world, None))
    done: set[UUID] = set()
    while True:
        await anyio.sleep(3.0)
        for job in list(world.jobs.job_table.values()):
            if job.id in done or job.state not in ENDED or not late_result_pending(world, job):
                continue
            done.add(job.id)
            try:
                after = await store.reprocess(job.id, world.clock.now())
                outcome = f"interpretation {after.interpretation}"
            except (LedgerUnavailable, JobError) as exc:
                outcome = type(exc).__name__
            world.trace.emit("operator", "jobs.reprocess", job=job.id, outcome=outcome,
                             eager=True)


async def drive(world: World) -> None:
    for name in WORKERS:
        world.spawn(supervise, world, name, lambda proc: work(world, proc))
    world.spawn(supervise, world, CANARY,
                lambda proc: work(world, proc, CANARY_VERSION, (20.0, 60.0)))
    producer = Producer(world)
    world.actors["producer"] = producer
    async with anyio.create_task_group() as tg:
        tg.start_soon(reprocessor, world)
        tg.start_soon(eager_reprocessor, world)
        await producer.run(world.streams.workload.randint(10, 25))
        await anyio.sleep(300.0)  # faults stay on while the workers catch up
        tg.cancel_scope.cancel()


def drained(world: World) -> bool:
    return all(j.state.terminal or j.state.waiting for j in world.jobs.job_table.values())


async def heal(world: World) -> None:
    """Faults are off: the producer delivers what it owes, the workers drain every job."""
    producer = world.actors.get("producer")
    if isinstance(producer, Producer):
        await producer.settle()
    deadline = anyio.current_time() + HEAL_DEADLINE_S
    while anyio.current_time() < deadline and not drained(world):
        await anyio.sleep(10.0)
    world.trace.emit("world", "drained", jobs=len(world.jobs.job_table), done=drained(world))


LEASED_JOBS = register(Scenario("leased_jobs", " ".join((__doc__ or "").split()), drive, heal,
                                vessel=False))
