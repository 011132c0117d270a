"""The simulated world: durable state, external actors, and a sequence of boots.

The MemoryLedger, MemoryBroker and effect sink are the world's disk: they
survive crashes, as do the leased-job and service-attempt stores that the
standalone worker processes of `sim.processes` share. A `Boot` is one
Vessel incarnation: its engine, worker lanes and relay run in one task
group. A crash marks the boot dead, cancels its tasks, and from then on
every seam call from it raises ProcessCrashed with no effect; its process
memory (coordinators, gates, caches) is dropped with the Boot object. The
next boot starts after a virtual delay with a new boot id and runs startup
reconciliation (DESIGN section 4).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import anyio.abc
import trio

from runtime.adapters.memory import MemoryBroker, MemoryEffectSink, MemoryLedger
from runtime.adapters.memory.jobs_store import MemoryJobStore
from runtime.adapters.memory.service_store import MemoryServiceStore
from runtime.app.lifespan import Lifespan, LifespanStatus, ShutdownIncomplete, StartupRefused
from runtime.app.profiles import build_vessel
from runtime.errors import ProcessCrashed
from runtime.events.bus import EventBus
from runtime.patterns import default_registry
from runtime.registry import WorkflowRegistry
from runtime.retry import retried
from runtime.seams import Deps, Ledger
from runtime.service import ServiceAttemptStore, ServiceContext
from sim.actors import BootAgents, BootOrchestrator, SimAgentRuntime, SimOrchestrator
from sim.clock import VirtualClock
from sim.faults import relay_bug
from sim.faults.injector import Injector
from sim.faults.proxies import (
    CheckpointStuck,
    SimBatchLedger,
    SimBroker,
    SimEffects,
    SimFaultPoints,
    SimLedger,
)
from sim.leased import SimModel
from sim.processes import Incarnation
from sim.provider import SimDriver, SimProvider, SimServiceStore
from sim.retry_checks import RetryWatch
from sim.rng import SeededEntropy, Streams
from sim.trace import Trace
from sim.tracked import TrackedTable

if TYPE_CHECKING:
    from sim.checker import Checker

T = TypeVar("T")


class Unavailable(Exception):
    """An external actor's request found no live process or lost it mid-call."""


class BootFailed(Exception):
    """A live boot raised an unexpected exception: a bug, reported as a verdict."""


@dataclass
class _Box:
    value: Any = None
    error: BaseException | None = None
    done: bool = False


class Boot(Incarnation):
    def __init__(self, world: World, number: int) -> None:
        self.world = world
        self.number = number
        self.id = f"boot-{number}"
        self.alive = True
        self.ready = False
        self.scope = anyio.CancelScope()
        self.tg: anyio.abc.TaskGroup | None = None
        sim_ledger = (SimBatchLedger if world.group_commit else SimLedger)(self, world.ledger)
        self.deps = Deps(
            clock=world.clock,
            entropy=world.entropy,
            ledger=cast(Ledger, RetryWatch(retried(sim_ledger, world.entropy),
                                           world.checker.retry_checks)),
            broker=SimBroker(self, world.broker),
            faults=SimFaultPoints(self),
            effects=SimEffects(self, world.effects),
            boot_id=self.id,
            agents=BootAgents(self, world.agents),
            orchestrator=BootOrchestrator(self, world.orchestrator),
            services=self._services(world),
            # Production's lingering writer where the world group-commits like
            # PostgreSQL; elsewhere none, so those scenarios keep their traces.
            step_linger_s=Deps.step_linger_s if world.group_commit else 0.0,
        )
        self.vessel = build_vessel(self.deps, registry=world.registry)
        if world.event_limits is not None:
            replay, queue, bounds = world.event_limits
            self.vessel.worker.bus = EventBus(replay_limit=replay, queue_limit=queue,
                                              max_subscribers=bounds[(number - 1) % len(bounds)])
        # The PostgreSQL profile is strict: a degraded reconciliation refuses to start,
        # and the world reboots until it can (the checker sees it in the trace).
        self.lifespan = Lifespan(self.vessel, strict=True, boot_lease_s=world.boot_lease_s)
        self.engine = self.vessel.engine
        self.worker = self.vessel.worker
        self.canceller = self.lifespan.canceller
        self.stopping = anyio.Event()
        self.stopped_cleanly = False
        self.requests: list[tuple[anyio.CancelScope, anyio.Event]] = []
        """In-flight requests (Boot.call): the scope that cancels each, and its end."""
        self.unrecorded_starts: set[str] = set()
        """Hop keys this boot's probes report active without a start (START_UNRECORDED)."""
        self.drifted: set[str] = set()
        """Hop keys whose delivery row this boot reads out of step (DELIVERY_DRIFT)."""
        self.frozen_until = 0.0
        """While virtual time is before this, the boot is stalled (FaultKind.BOOT_STALL)."""
        self.partitioned_until = 0.0
        """While virtual time is before this, only this boot cannot reach the database."""
        self.stalls: list[tuple[float, float]] = []
        """(from, until) of every stall: the process did nothing then, touches included."""
        self.unreachable: list[tuple[float, float]] = []
        """(from, until) of every stall and partition: a lease lapsed within one is this
        boot's own doing (sim.boot_checks)."""
        self.gone: anyio.Event | None = None
        """Set once the world counts this boot out (crash, stop, presumed dead): in a
        world of leased boots its slot then starts a successor (World.run_boots)."""

    def _services(self, world: World) -> ServiceContext:
        """Service waits of this boot: the world's attempts and provider, through
        this boot's faults (a crash after a store commit kills the boot)."""
        return ServiceContext(
            store=cast(ServiceAttemptStore, SimServiceStore(world, self)),
            driver=SimDriver(world, self),
            clock=world.clock,
            faults=SimFaultPoints(self),
        )


    def crash(self, reason: str) -> None:
        if not self.alive:
            return
        self.alive = False
        self.world.checker.relay_checks.boot_ended(self.number)
        self.scope.cancel()
        self._leave()
        self.world.trace.emit("world", "boot.crash", boot=self.number, reason=reason)

    def _leave(self) -> None:
        """Clients stop reaching this boot; they reach another serving one, if any."""
        if self.world.live_boot is self:
            self.world.live_boot = self.world.serving_peer(self)
        if self.gone is not None:
            self.gone.set()

    @property
    def frozen(self) -> bool:
        return trio.current_time() < self.frozen_until

    @property
    def resumed_zombie(self) -> bool:
        """A stall of this boot ended: it was counted out (its slot started a successor)
        and goes on beside it (FaultKind.ZOMBIE_KILL may end it)."""
        return bool(self.stalls) and not self.frozen

    def partitioned(self) -> bool:
        return not self.world.injector.healed and trio.current_time() < self.partitioned_until

    def stall(self, seconds: float) -> None:
        """A zombie: the process freezes (every seam call waits), its lease lapses and the
        world presumes it dead and starts a successor; after `seconds` it goes on."""
        now = trio.current_time()
        self.frozen_until = max(self.frozen_until, now + seconds)
        self.stalls.append((now, self.frozen_until))
        self.unreachable.append((now, self.frozen_until))
        self.world.trace.emit("world", "boot.stall", boot=self.number, seconds=seconds)
        self._leave()

    def partition(self, seconds: float) -> None:
        """Only this boot loses the database for `seconds`; it keeps serving and retrying."""
        now = trio.current_time()
        self.partitioned_until = max(self.partitioned_until, now + seconds)
        self.world.partitions_end = max(self.world.partitions_end, self.partitioned_until)
        self.unreachable.append((now, self.partitioned_until))
        self.world.trace.emit("world", "boot.partition", boot=self.number, seconds=seconds)

    async def thaw(self) -> None:
        """Wait while stalled; a crash meanwhile ends the call."""
        while trio.current_time() < self.frozen_until:
            await anyio.sleep(self.frozen_until - trio.current_time())
        self.check_alive()

    def stop(self) -> None:
        """A graceful restart: leave serving and run the lifespan's shutdown."""
        self.world.checker.relay_checks.boot_ended(self.number)
        self.stopping.set()

    async def run(self) -> None:
        """Live until crashed or stopped; a failed startup counts as a crash."""
        self.world.trace.boot = self.number
        self.world.trace.emit("world", "boot.start", boot=self.number)
        try:
            with self.scope:
                async with anyio.create_task_group() as tg:
                    self.tg = tg
                    await self._serve()
                    tg.cancel_scope.cancel()
        except BaseException as exc:
            self._classify(exc)

    async def _serve(self) -> None:
        try:
            async with self.lifespan.serving() as status:
                self._started(status)
                await self.stopping.wait()
                self.world.trace.emit("world", "boot.stopping", boot=self.number)
                if self.world.live_boot is self:
                    self.world.live_boot = self.world.serving_peer(self)
                if self.world.cancel_requests_at_stop:
                    await self._cancel_requests()
        except (StartupRefused, ShutdownIncomplete) as exc:
            self.world.trace.emit("world", "boot.refused", reason=str(exc))
            refused = self.lifespan.status.report
            if isinstance(exc, StartupRefused) and refused is not None:
                self.world.checker.on_startup_report(self.number, refused.deliveries,
                                                     refused.refired)
            self.crash(type(exc).__name__)
            raise ProcessCrashed(self.id) from exc
        except Exception as exc:
            if self.lifespan.status.phase in ("starting", "reconciling"):
                cleanup = _caused_by(exc, CheckpointStuck)
                self.world.trace.emit("world", "startup.failed", error=type(exc).__name__,
                                      **({"cleanup": True} if cleanup else {}))
                self.world.checker.on_startup_failed(self.number, cleanup)
                self.crash(f"startup failed: {type(exc).__name__}")
                raise ProcessCrashed(self.id) from exc
            raise
        self.stopped_cleanly = True
        self.alive = False
        self.world.trace.emit("world", "boot.stopped", boot=self.number)

    def _started(self, status: LifespanStatus) -> None:
        report = status.report
        assert report is not None
        self.world.checker.on_startup_report(self.number, report.deliveries, report.refired)
        self.world.trace.emit(
            "world", "startup.done", degraded=report.degraded,
            failed_orphans=len(report.failed_orphans),
            orphans={k: len(v) for k, v in sorted(report.orphans.items())},
            deliveries={k: len(v) for k, v in sorted(report.deliveries.items())},
            refired=len(report.refired), repaired=len(report.repaired),
        )
        visited = {run_id for group in (report.cancelling, report.orphans, report.deliveries)
                   for ids in group.values() for run_id in ids}
        self.world.checker.on_startup_done(self.number, report.degraded, visited,
                                           report.cleanup_owed)
        self.ready = True
        if self.lifespan.relays is not None:
            relay_bug.install(self, self.lifespan.relays)
        if not self.frozen:
            self.world.live_boot = self

    def _classify(self, exc: BaseException) -> None:
        cancelled = anyio.get_cancelled_exc_class()
        rest: BaseException | None
        if isinstance(exc, BaseExceptionGroup):
            _, rest = exc.split((ProcessCrashed, cancelled))
        else:
            rest = None if isinstance(exc, ProcessCrashed | cancelled) else exc
        if rest is None:
            # Only crashes and cancellation: a crash, or the world itself being torn
            # down (end of simulation or the watchdog), which cancels live boots too.
            return
        raise BootFailed(f"{self.id} raised {rest!r}") from rest

    async def _cancel_requests(self) -> None:
        """World.cancel_requests_at_stop: cancel every in-flight request, then wait
        until each has ended (its shielded cleanup included)."""
        requests = list(self.requests)
        for scope, _ in requests:
            scope.cancel()
        for _, ended in requests:
            await ended.wait()

    async def call(self, fn: Callable[[Boot], Awaitable[T]]) -> T:
        """Run a request inside this process, as an HTTP handler would."""
        box = _Box()
        finished = anyio.Event()
        request = (anyio.CancelScope(), finished)

        async def handler() -> None:
            self.requests.append(request)
            try:
                with request[0]:
                    box.value = await fn(self)
                    box.done = True
            except Exception as exc:
                box.error = exc
            finally:
                self.requests.remove(request)
                finished.set()

        if not self.alive or self.tg is None:
            raise Unavailable(self.id)
        self.tg.start_soon(handler, name=_HANDLER_NAME)
        await finished.wait()
        if box.error is not None:
            raise box.error
        if not box.done:
            raise Unavailable(self.id)
        return box.value  # type: ignore[no-any-return]


_HANDLER_NAME = f"{__name__}.Boot.call.<locals>.handler"
"""The task name anyio derives for `Boot.call`'s handler, given up front: anyio builds
it from the function's module and qualified name on every start_soon otherwise."""


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """`exc`, a group member, or anything in its cause/context chain is a `kind`."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, kind):
            return True
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    return False


@dataclass
class World:
    seed: int
    streams: Streams
    injector: Injector
    trace: Trace = field(default_factory=Trace)
    clock: VirtualClock = field(default_factory=VirtualClock)
    registry: WorkflowRegistry = field(default_factory=default_registry)
    ledger: MemoryLedger = field(default_factory=MemoryLedger)
    effects: MemoryEffectSink = field(default_factory=MemoryEffectSink)
    jobs: MemoryJobStore = field(default_factory=MemoryJobStore)
    """Leased jobs and their evidence (seed 004): durable across worker processes."""
    services: MemoryServiceStore = field(default_factory=MemoryServiceStore)
    """ServiceJobAttempt@1 records (seed 000): durable across worker processes."""
    live_boot: Boot | None = None
    boots: list[Boot] = field(default_factory=list)
    actors: dict[str, object] = field(default_factory=dict)
    stuck_checkpoints: set[str] = field(default_factory=set)
    """Runs whose checkpoint deletion fails until heal (FaultKind.CHECKPOINT_STUCK)."""
    stuck_claims: set[str] = field(default_factory=set)
    """Hop keys whose every claim fails until heal (FaultKind.CLAIM_STUCK)."""
    shutting_down: bool = False
    ledger_down_until: float = 0.0
    """Virtual time until which the database is unreachable (FaultKind.LEDGER_OUTAGE)."""
    partitions_end: float = 0.0
    """When the last partition of any boot ends (Boot.partition keeps it): read on
    every ledger call, so no scan of every boot the world ever started."""

    def blips_ended(self) -> float:
        """When the last outage or partition of any boot ended (or will end)."""
        return max(self.ledger_down_until, self.partitions_end)
    seq_watch: dict[str, tuple[int, anyio.Event]] = field(default_factory=dict)
    """Pending stale redeliveries (FaultKind.STALE_REDELIVERY): Run id -> the old
    sequence and the event set once the Run's sequence moves on."""
    boot_lease_s: float | None = None
    """With a lease, every boot registers in the boot registry and renews its lease, as
    on PostgreSQL (issue 15): set by scenarios of zombie and concurrent boots."""
    vessels: int = 1
    """Vessel processes serving the one database at once, each restarted after a death."""
    event_limits: tuple[int, int, tuple[int, ...]] | None = None
    """(replay, queue, subscriber bounds) of every boot's event channels instead of the
    runtime's (256, 256, 1024): the events scenario reaches its resync boundaries with
    fewer tokens, and its readers the subscriber bound; boot n takes the bound
    `bounds[(n - 1) % len(bounds)]`."""
    group_commit: bool = False
    """Boots' ledgers offer `append_steps`, so Step writers group-commit (SimBatchLedger)."""
    cancel_requests_at_stop: bool = False
    """A graceful stop cancels the boot's in-flight requests and waits for them before
    its lifespan shuts down, as a server's graceful-shutdown timeout does (uvicorn:
    handlers first, then the lifespan): their shielded cleanup (a publisher's late-job
    fence) then still reaches the broker. Off, handlers are cancelled only after the
    lifespan ended and the boot counts as gone, so those scenarios keep their traces."""
    writer: Boot | None = None
    """The boot whose ledger write the checker is looking at (set by SimLedger)."""
    taken_by: dict[str, int] = field(default_factory=dict)
    """Hop key -> the boot whose worker last dequeued its job (worlds of leased boots)."""
    aborted_by: dict[str, int] = field(default_factory=dict)
    """Hop key -> the boot that last sent its job an abort (worlds of leased boots)."""
    background: anyio.abc.TaskGroup | None = None
    """The simulation's own task group: actors that outlive a scenario phase run here."""
    checker: Checker = field(init=False)

    def __post_init__(self) -> None:
        from sim.checker import Checker

        self.entropy = SeededEntropy(self.streams.ids)
        self.ledger.services = self.services  # one database: the owner CAS reads attempts
        # The checker reads only the Run and delivery rows each write touched (sim/tracked.py).
        self.ledger.run_table = TrackedTable(self.ledger.run_table)
        self.ledger.delivery_table = TrackedTable(self.ledger.delivery_table)
        self.broker = MemoryBroker(self.clock)
        self.checker = Checker(self)
        self.agents = SimAgentRuntime(self)
        self.orchestrator = SimOrchestrator(self)
        self.model = SimModel(self)
        self.provider = SimProvider(self)
        self.stop = anyio.Event()

    @property
    def leased(self) -> bool:
        """Boots register leases and may overlap (zombies, several Vessels)."""
        return self.boot_lease_s is not None

    def serving_peer(self, leaving: Boot) -> Boot | None:
        """Another ready boot that clients can reach instead of `leaving` (newest first)."""
        for boot in reversed(self.boots):
            if boot is not leaving and boot.alive and boot.ready and not boot.frozen \
                    and not boot.stopping.is_set():
                return boot
        return None

    def stalled_within(self, boot_id: str, start: float, end: float) -> bool:
        """Whether boot `boot_id` was stalled at some moment of [start, end]."""
        return any(b.id == boot_id and any(s <= end and start <= u for s, u in b.stalls)
                   for b in self.boots)

    def alive_boots(self) -> list[Boot]:
        return [boot for boot in self.boots if boot.alive]

    def work_items(self) -> int:
        """Leased jobs and service attempts (besides Runs) this world holds."""
        return len(self.jobs.job_table) + len(self.services.attempt_table)

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Start `fn` in the simulation's own task group (it ends with the simulation)."""
        if self.background is None:
            raise RuntimeError("the simulation has not started")
        self.background.start_soon(fn, *args)

    def trace_end(self) -> float:
        """Virtual seconds at the last trace line."""
        return self.trace.last_t

    async def wait_live(self) -> Boot:
        """The live boot, waiting (in virtual time) for one to finish starting."""
        while self.live_boot is None:
            await anyio.sleep(0.5)
        return self.live_boot

    def request_stop(self) -> None:
        self.stop.set()

    def after_transaction(self, name: str) -> None:
        self.checker.after_transaction(name)

    async def request(self, fn: Callable[[Boot], Awaitable[T]]) -> T:
        boot = self.live_boot
        if boot is None:
            raise Unavailable("no live process")
        return await boot.call(fn)

    async def run_boots(self) -> None:
        """Boot, run until crashed, wait a virtual delay, boot again; forever.

        In a world of leased boots each of `vessels` slots does so, and a slot counts
        its boot out as soon as it is presumed dead (stalled): the zombie goes on in
        the background and its successor starts beside it."""
        if self.leased:
            async with anyio.create_task_group() as tg:
                for _ in range(self.vessels):
                    tg.start_soon(self._slot)
            return
        low, high = self.injector.options.restart_delay_s
        while True:
            boot = Boot(self, len(self.boots) + 1)
            self.boots.append(boot)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._random_crash, boot)
                await boot.run()
                tg.cancel_scope.cancel()
            # The downtime runs outside the boot's (cancelled) scope: inside it the
            # sleep returned at once and every restart was instantaneous.
            await anyio.sleep(round(self.streams.restarts.uniform(low, high), 3))

    async def _slot(self) -> None:
        low, high = self.injector.options.restart_delay_s
        while True:
            boot = Boot(self, len(self.boots) + 1)
            boot.gone = anyio.Event()
            self.boots.append(boot)
            self.spawn(self._live, boot)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._random_crash, boot)
                await boot.gone.wait()
                tg.cancel_scope.cancel()
            await anyio.sleep(round(self.streams.restarts.uniform(low, high), 3))

    @staticmethod
    async def _live(boot: Boot) -> None:
        try:
            await boot.run()
        finally:
            assert boot.gone is not None
            boot.gone.set()

    async def _random_crash(self, boot: Boot) -> None:
        at = self.injector.roll_boot_crash(trio.current_time())
        if at is None:
            return
        await anyio.sleep(max(0.0, at - trio.current_time()))
        if boot.alive and self.injector.time_crash_fires(at):
            boot.crash(f"random crash at t={at:g}")

    async def planned_time_crashes(self) -> None:
        for at in self.injector.planned_times():
            await anyio.sleep(max(0.0, at - trio.current_time()))
            boot = self.live_boot
            if boot is not None and self.injector.time_crash_fires(at):
                boot.crash(f"planned crash at t={at:g}")
