"""Deterministic test doubles for the unit tests.

A `FakeClock` that only moves when a test says so, a counter-based
`FakeEntropy`, a `ScriptedFaults` that can raise at a named point, and a
`SpyBroker` around the `MemoryBroker` that counts calls and can refuse
publication. `make_world` wires them into `Deps`, an engine and a worker.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from runtime.adapters.memory import MemoryBroker, MemoryEffectSink, MemoryLedger
from runtime.engine import RunEngine
from runtime.errors import BrokerUnavailable
from runtime.hop import HopContext
from runtime.models import LedgerDump, Settlement
from runtime.patterns import default_registry
from runtime.registry import Node, Pattern, QueueRouter, WorkflowRegistry
from runtime.seams import Deps, HopHandler, JobInfo
from runtime.worker import Worker

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


class FakeClock:
    """Aware UTC time that advances only through `advance`."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self._start = start
        self._offset = 0.0

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._offset)

    def monotonic(self) -> float:
        return self._offset

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        self._offset += seconds


class FakeEntropy:
    """Ids from a counter, jitter from a seeded generator."""

    def __init__(self, seed: int = 0) -> None:
        self._next = 0
        self._random = random.Random(seed)

    def new_id(self) -> UUID:
        self._next += 1
        return UUID(int=self._next)

    def random(self) -> float:
        return self._random.random()


@dataclass
class ScriptedFaults:
    """Records every fault point hit; raises `exc` at the `nth` hit of `name`."""

    hits: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    plan: dict[str, tuple[int, BaseException]] = field(default_factory=dict)
    observers: dict[str, Callable[[], None]] = field(default_factory=dict)

    def raise_at(self, name: str, exc: BaseException, nth: int = 1) -> None:
        self.plan[name] = (nth, exc)

    def observe(self, name: str, fn: Callable[[], None]) -> None:
        """Call `fn` (synchronously, between transactions) whenever `name` is hit."""
        self.observers[name] = fn

    async def point(self, name: str, **context: Any) -> None:
        self.hits.append((name, context))
        if name in self.observers:
            self.observers[name]()
        if name in self.plan:
            nth, exc = self.plan[name]
            if sum(1 for n, _ in self.hits if n == name) == nth:
                del self.plan[name]
                raise exc

    def names(self) -> list[str]:
        return [n for n, _ in self.hits]


class LedgerProxy:
    """Wraps a MemoryLedger: logs transaction names and can make one of them fail.

    `fail_once(name, exc, after=True)` applies the transaction and then raises
    (an ambiguous commit); `after=False` raises without applying it.
    """

    def __init__(self, inner: MemoryLedger) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self._failures: dict[str, tuple[BaseException, bool]] = {}

    def fail_once(self, name: str, exc: BaseException, *, after: bool) -> None:
        self._failures[name] = (exc, after)

    def dump_now(self) -> LedgerDump:
        return self.inner.dump_now()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(attr):
            return attr

        async def logged(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            failure = self._failures.pop(name, None)
            if failure is not None and not failure[1]:
                raise failure[0]
            result = await attr(*args, **kwargs)
            if failure is not None:
                raise failure[0]
            return result

        return logged


@dataclass
class SpyBroker:
    """A MemoryBroker that records calls and can fail publication on demand."""

    inner: MemoryBroker
    fail_publish: bool = False
    publishes: list[dict[str, Any]] = field(default_factory=list)
    touches: list[tuple[str, float]] = field(default_factory=list)
    on_touch: Callable[[str], None] | None = None

    async def publish(
        self, queue: str, key: str, *, run_id: UUID, seq: int, priority: int, heartbeat: int
    ) -> bool:
        self.publishes.append(
            {"queue": queue, "key": key, "run_id": run_id, "seq": seq, "priority": priority,
             "heartbeat": heartbeat}
        )
        if self.fail_publish:
            raise BrokerUnavailable("broker down (test)")
        return await self.inner.publish(
            queue, key, run_id=run_id, seq=seq, priority=priority, heartbeat=heartbeat
        )

    async def probe(self, key: str) -> JobInfo | None:
        return await self.inner.probe(key)

    async def abort(self, key: str, reason: str) -> JobInfo | None:
        return await self.inner.abort(key, reason)

    async def touch(self, key: str) -> None:
        import anyio

        self.touches.append((key, anyio.current_time()))
        if self.on_touch is not None:
            self.on_touch(key)
        await self.inner.touch(key)

    async def retire(self, key: str, reason: str) -> JobInfo | None:
        return await self.inner.retire(key, reason)

    async def serve(
        self, queue: str, handler: HopHandler, concurrency: int, *, boot_id: str | None = None
    ) -> None:
        from runtime.adapters.memory.broker import serve_queue

        await serve_queue(self.inner, queue, handler, concurrency, boot_id=boot_id)


@dataclass
class World:
    clock: FakeClock
    entropy: FakeEntropy
    ledger: Any  # MemoryLedger or LedgerProxy
    broker: SpyBroker
    faults: ScriptedFaults
    effects: MemoryEffectSink
    deps: Deps
    registry: WorkflowRegistry
    engine: RunEngine
    worker: Worker

    def dump(self) -> LedgerDump:
        return self.ledger.dump_now()

    def jobs(self) -> dict[str, JobInfo]:
        return {k: j.info for k, j in sorted(self.broker.inner.jobs.items())}


def make_world(
    registry: WorkflowRegistry | None = None,
    router: QueueRouter | None = None,
    ledger: MemoryLedger | LedgerProxy | None = None,
    boot_id: str = "boot-1",
) -> World:
    clock = FakeClock()
    entropy = FakeEntropy()
    ledger = ledger if ledger is not None else MemoryLedger()
    broker = SpyBroker(MemoryBroker(clock))
    faults = ScriptedFaults()
    effects = MemoryEffectSink()
    deps = Deps(
        clock=clock, entropy=entropy, ledger=ledger, broker=broker, faults=faults,
        effects=effects, boot_id=boot_id,
    )
    registry = registry if registry is not None else default_registry()
    engine = RunEngine(deps, registry, router if router is not None else QueueRouter())
    worker = Worker(deps, registry)
    return World(clock, entropy, ledger, broker, faults, effects, deps, registry, engine, worker)


NodeBody = Callable[[HopContext, dict[str, Any]], Awaitable[dict[str, Any]]]


def pattern_of(name: str, *bodies: NodeBody, version: int = 1, queue: str | None = None
               ) -> Pattern:
    """A Pattern whose nodes are the given coroutines, named n0, n1, ..."""
    return Pattern(
        name=name,
        version=version,
        nodes=tuple(Node(f"n{i}", body) for i, body in enumerate(bodies)),
        queue=queue,
    )


async def settle_alone(self: Any, settlement: Settlement) -> None:
    """`HopEvents.fold_terminal` of a hop whose Step writer is not idle: it settles
    alone and its terminal Step follows through the writer (the window between
    truth and evidence that an idle writer's hop no longer has, issue 17)."""
    return None
