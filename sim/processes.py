"""Standalone worker processes of the simulated world (not Vessel boots).

A leased-job worker (`vessel jobs work`, seed 004_85033eb8fc772f12.txt) or
a service domain worker is its own operating-system process. Here each one
is a `Process` incarnation: its tasks run in one cancel scope; a crash marks
it dead, cancels its tasks, and from then on every seam call it makes raises
ProcessCrashed without effect (the memory stores' `enter()` gate re-checks
liveness right before writing, as for boots). A *stall* freezes the process
(a stopped VM, a long GC pause): its calls wait until it thaws, so it also
stops renewing its leases. `supervise` restarts a dead process after a
virtual delay as a new incarnation with a new id; nothing of the dead
incarnation's memory reaches the next. `ProcessFaults` is the FaultPoints
seam of one incarnation: a crash at a catalogued point kills it there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import trio

from runtime.adapters.memory.gate import BEFORE_APPLY
from runtime.errors import ProcessCrashed
from runtime.faults import CATALOGUE
from sim.faults.plan import FaultKind

if TYPE_CHECKING:
    from sim.world import World

T = TypeVar("T")


class Incarnation(ABC):
    """What store and driver proxies need of any simulated process (a worker
    `Process` or a Vessel `Boot`): its liveness gate, its crash, fault draws."""

    world: World
    id: str
    alive: bool

    def check_alive(self) -> None:
        if not self.alive:
            raise ProcessCrashed(self.id)

    @abstractmethod
    def crash(self, reason: str) -> None:
        """Die now: mark dead, cancel every task; later seam calls raise ProcessCrashed."""

    async def guard(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run one store transaction with this process's liveness gate installed."""
        self.check_alive()
        token = BEFORE_APPLY.set(self.check_alive)
        try:
            return await op()
        finally:
            BEFORE_APPLY.reset(token)

    def fire(self, point: str, kinds: tuple[FaultKind, ...]) -> tuple[FaultKind | None, float]:
        return fire(self.world, point, kinds)


class Process(Incarnation):
    def __init__(self, world: World, name: str, number: int) -> None:
        self.world = world
        self.name = name
        self.number = number
        self.id = f"{name}.{number}"
        self.alive = True
        self.scope = anyio.CancelScope()
        self.tg: anyio.abc.TaskGroup | None = None
        self.frozen_until = 0.0

    def crash(self, reason: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self.scope.cancel()
        self.world.trace.emit("workers", "process.crash", process=self.id, reason=reason)

    def freeze(self, seconds: float) -> None:
        until = trio.current_time() + seconds
        if until > self.frozen_until:
            self.frozen_until = until
        self.world.trace.emit("workers", "process.stall", process=self.id, seconds=seconds)

    async def thaw(self) -> None:
        """Wait while the process is frozen; a crash meanwhile ends the call."""
        while trio.current_time() < self.frozen_until:
            await anyio.sleep(self.frozen_until - trio.current_time())
        self.check_alive()

    async def call(self, fn: Callable[[Process], Awaitable[T]]) -> T:
        """Serve one request inside this process: it dies with the process."""
        from sim.world import Unavailable

        if not self.alive or self.tg is None:
            raise Unavailable(self.id)
        box: dict[str, Any] = {}
        finished = anyio.Event()

        async def handler() -> None:
            try:
                box["value"] = await fn(self)
            except Exception as exc:
                box["error"] = exc
            finally:
                finished.set()

        self.tg.start_soon(handler)
        await finished.wait()
        if "error" in box:
            raise box["error"]
        if "value" not in box:
            raise Unavailable(self.id)
        return box["value"]  # type: ignore[no-any-return]


class ProcessFaults:
    """The FaultPoints of one process incarnation (runtime.faults windows).

    A CRASH at a catalogued point kills the incarnation exactly there. At the
    points named in `late` a LATE_RESULT may fire instead: the process keeps
    running, but what it holds reaches the store only after `amount` seconds
    (long enough for its lease to lapse and a newer fence to take the job).
    """

    def __init__(self, proc: Process, late: Collection[str] = ()) -> None:
        self.proc = proc
        self.late = frozenset(late)

    async def point(self, name: str, **context: Any) -> None:
        proc = self.proc
        proc.check_alive()
        if name not in CATALOGUE:
            raise AssertionError(f"fault point {name!r} is not catalogued in runtime.faults")
        kinds: tuple[FaultKind, ...] = (FaultKind.CRASH,)
        if name in self.late:
            kinds = (*kinds, FaultKind.LATE_RESULT)
        fault, amount = proc.fire(name, kinds)
        if fault is FaultKind.CRASH:
            proc.world.checker.on_crash_point(name, proc.number, context)
            proc.crash(f"crash at {name}")
            raise ProcessCrashed(proc.id)
        if fault is FaultKind.LATE_RESULT:
            await anyio.sleep(amount)
        await proc.thaw()


def fire(world: World, point: str, kinds: tuple[FaultKind, ...]) -> tuple[FaultKind | None, float]:
    """Ask the injector at `point`; a fired fault goes to the trace."""
    pf = world.injector.hit(point, kinds)
    if pf is None:
        return None, 0.0
    world.trace.emit("faults", "fault.fired", point=point, fault=pf.fault, amount=pf.amount)
    return pf.fault, pf.amount


async def supervise(
    world: World,
    name: str,
    body: Callable[[Process], Awaitable[None]],
    registry: dict[str, Process] | None = None,
) -> None:
    """Run `body` in incarnation after incarnation of process `name`, forever.

    `registry` (when given) always maps `name` to the live incarnation, so that
    other actors can reach the process, as a client reaches a server.
    """
    low, high = world.injector.options.restart_delay_s
    number = 0
    while True:
        number += 1
        proc = Process(world, name, number)
        if registry is not None:
            registry[name] = proc
        world.trace.emit("workers", "process.start", process=proc.id)
        try:
            with proc.scope:
                async with anyio.create_task_group() as tg:
                    proc.tg = tg
                    await body(proc)
                    tg.cancel_scope.cancel()
        except BaseException as exc:
            if proc.alive or not _only_death(exc):
                raise
        if proc.alive:  # the body returned without a crash: the process exits
            world.trace.emit("workers", "process.exit", process=proc.id)
            return
        await anyio.sleep(round(world.streams.restarts.uniform(low, high), 3))


def _only_death(exc: BaseException) -> bool:
    """The exception is nothing but the process dying (crash or cancellation)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_death(e) for e in exc.exceptions)
    return isinstance(exc, ProcessCrashed | anyio.get_cancelled_exc_class())
