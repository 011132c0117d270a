"""Shared doubles for the durable-wait, hardware, cancellation and recovery tests.

`wait_world` wires the same memory adapters as `fakes.make_world`, plus a
scriptable agent runtime and orchestrator and a broker that keeps an event
log. `reboot` builds the next process incarnation over the same ledger and
broker, which is how a test simulates restart after a crash raised by a
fault point.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import anyio

from runtime.adapters.memory import MemoryBroker, MemoryEffectSink, MemoryLedger
from runtime.engine import RunEngine
from runtime.errors import BrokerUnavailable
from runtime.graph.budget import HardwareState
from runtime.graph.transitions import AwaitConsent, End, NeedHardware
from runtime.hop import HopContext
from runtime.models import AgentJob, AgentJobStatus, Intent, Run
from runtime.patterns import default_registry
from runtime.registry import Node, Pattern, WorkflowRegistry
from runtime.seams import AgentJobReport, AgentRuntime, Deps, JobInfo, Orchestrator
from runtime.worker import HopOutcome, Worker
from tests.unit.fakes import FakeClock, FakeEntropy, LedgerProxy, ScriptedFaults, SpyBroker, World


class Crash(BaseException):
    """The process dies here: raised by a fault point, never caught by runtime code."""


def crashed(exc: BaseException) -> bool:
    """True when `exc` is a Crash, possibly wrapped in exception groups."""
    if isinstance(exc, Crash):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(crashed(e) for e in exc.exceptions)
    return False


@dataclass
class LoggingBroker(SpyBroker):
    """A SpyBroker that logs aborts and finished probes and can lose abort acks."""

    log: list[str] = field(default_factory=list)
    lost_abort_acks: int = 0
    """How many of the next aborts fail with BrokerUnavailable before being applied."""
    aborts: list[str] = field(default_factory=list)

    async def abort(self, key: str, reason: str) -> JobInfo | None:
        self.aborts.append(key)
        if self.lost_abort_acks > 0:
            self.lost_abort_acks -= 1
            self.log.append(f"abort-lost {key}")
            raise BrokerUnavailable("abort acknowledgement lost (test)")
        self.log.append(f"abort {key}")
        return await self.inner.abort(key, reason)

    async def probe(self, key: str) -> JobInfo | None:
        info = await self.inner.probe(key)
        if info is not None and info.status.finished:
            self.log.append(f"finished {key}")
        return info


@dataclass
class FakeAgents:
    """A scriptable AgentRuntime.

    A submitted job reports `on_submit` (None: it is not known yet). `reports`
    can be edited by a test; `forget()` drops the process-local projection.
    `cancel_acks` scripts the answers of cancel (True once exhausted).
    """

    on_submit: AgentJobStatus = AgentJobStatus.RUNNING
    result: dict[str, Any] | None = field(default_factory=lambda: {"answer": 42})
    reports: dict[UUID, AgentJobReport] = field(default_factory=dict)
    submitted: list[UUID] = field(default_factory=list)
    lookups: list[UUID] = field(default_factory=list)
    cancels: list[UUID] = field(default_factory=list)
    cancel_acks: list[bool] = field(default_factory=list)
    log: list[str] | None = None
    on_cancel: Callable[[UUID], None] | None = None
    block_submit: bool = False

    async def submit(self, job: AgentJob) -> None:
        self.submitted.append(job.id)
        if self.block_submit:
            await anyio.sleep_forever()
        if job.id not in self.reports:
            result = self.result if self.on_submit is AgentJobStatus.SUCCEEDED else None
            self.reports[job.id] = AgentJobReport(status=self.on_submit, result=result)

    async def lookup(self, job_id: UUID) -> AgentJobReport | None:
        self.lookups.append(job_id)
        return self.reports.get(job_id)

    async def cancel(self, job_id: UUID) -> bool:
        self.cancels.append(job_id)
        if self.on_cancel is not None:
            self.on_cancel(job_id)
        ack = self.cancel_acks.pop(0) if self.cancel_acks else True
        if self.log is not None:
            self.log.append(f"agent-cancel {job_id} {'ack' if ack else 'nack'}")
        if ack:
            self.reports[job_id] = AgentJobReport(status=AgentJobStatus.CANCELLED)
        return ack

    def finish(self, job_id: UUID, status: AgentJobStatus, result: Any = None) -> None:
        self.reports[job_id] = AgentJobReport.model_construct(status=status, result=result)

    def forget(self) -> None:
        self.reports.clear()


@dataclass
class FakeOrchestrator:
    """Records every converge call; `behaviour` may raise or block."""

    calls: list[str] = field(default_factory=list)
    on_call: Callable[[UUID, str], None] | None = None
    fail_with: Exception | None = None
    block: bool = False

    async def converge(self, run_id: UUID, capability: str) -> None:
        self.calls.append(capability)
        if self.on_call is not None:
            self.on_call(run_id, capability)
        if self.block:
            await anyio.sleep_forever()
        if self.fail_with is not None:
            raise self.fail_with


class Plan(HardwareState):
    """A script of steps: a capability name asks for hardware, "consent" parks.

    Each visit records the Run's status as the ledger holds it, and the end
    result reports the hardware budget the state carried.
    """

    steps: list[str] = []
    trail: list[str] = []


async def _step(ctx: HopContext, state: Plan) -> Any:
    run = await ctx.deps.ledger.get_run(ctx.run.id)
    assert run is not None
    state = state.model_copy(update={"trail": [*state.trail, run.status.value]})
    if not state.steps:
        b = state.hardware_resume_budget
        return state, End(result={"total": b.total, "consecutive": b.consecutive,
                                  "last": b.last_capability, "trail": state.trail})
    head, rest = state.steps[0], state.steps[1:]
    state = state.model_copy(update={"steps": rest})
    if head == "consent":
        return state, AwaitConsent(then="step")
    return state, NeedHardware(capability=head, then="step")


PLAN = Pattern(name="plan", version=1, state_model=Plan, nodes=(Node("step", _step),))


def wait_world(
    *patterns: Pattern,
    agents: AgentRuntime | None = None,
    orchestrator: Orchestrator | None = None,
    proxy: bool = False,
    boot_id: str = "boot-1",
) -> World:
    """A World with the default registry plus `patterns`, and the given actors."""
    registry = default_registry()
    for p in patterns:
        registry.register(p)
    clock = FakeClock()
    entropy = FakeEntropy()
    memory = MemoryLedger()
    ledger: MemoryLedger | LedgerProxy = LedgerProxy(memory) if proxy else memory
    broker = LoggingBroker(MemoryBroker(clock))
    faults = ScriptedFaults()
    effects = MemoryEffectSink()
    deps = Deps(
        clock=clock, entropy=entropy, ledger=ledger, broker=broker, faults=faults,
        effects=effects, boot_id=boot_id, agents=agents, orchestrator=orchestrator,
    )
    engine = RunEngine(deps, registry)
    return World(clock, entropy, ledger, broker, faults, effects, deps, registry, engine,
                 Worker(deps, registry))


def reboot(
    w: World, boot_id: str = "boot-2", registry: WorkflowRegistry | None = None
) -> World:
    """The next process incarnation: same ledger, broker, clock and id source."""
    w.clock.advance(1)
    registry = registry if registry is not None else w.registry
    faults = ScriptedFaults()
    deps = dataclasses.replace(w.deps, faults=faults, boot_id=boot_id)
    return dataclasses.replace(
        w, faults=faults, deps=deps, registry=registry,
        engine=RunEngine(deps, registry), worker=Worker(deps, registry),
    )


def tables(w: World) -> MemoryLedger:
    """The MemoryLedger under a World, even when it is wrapped by a LedgerProxy."""
    inner = getattr(w.ledger, "inner", w.ledger)
    assert isinstance(inner, MemoryLedger)
    return inner


def run_of(w: World, run_id: UUID) -> Run:
    return tables(w).run_table[run_id]


async def admit(w: World, pattern: str, **content: Any) -> UUID:
    sub = await w.engine.submit(Intent(pattern=pattern, sigil="alice", content=content))
    return sub.run.id


async def hop(w: World, run_id: UUID) -> HopOutcome:
    """Perform the Run's current delivery in this incarnation."""
    return await w.worker.perform_run(run_id, run_of(w, run_id).seq)


async def crash_hop(w: World, run_id: UUID) -> None:
    """Perform the current delivery; it must die with Crash at a fault point."""
    try:
        await hop(w, run_id)
    except BaseException as exc:
        if not crashed(exc):
            raise
        return
    raise AssertionError("the hop was expected to crash")
