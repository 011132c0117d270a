"""Injectors as proxies around the seams one boot sees.

Each proxy first refuses any call from a dead boot (ProcessCrashed, no
effect), asks the Injector whether a fault fires at this operation, applies
it, and reports committed writes to the world (trace and checker). The
gate hook of the memory adapters re-checks liveness right before any write,
so a call that was parked when its boot died still has no effect.
"""

from __future__ import annotations

import math
import sys
import zlib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import anyio
import trio

from runtime.adapters.memory import MemoryBroker, MemoryEffectSink, MemoryLedger
from runtime.adapters.memory.broker import serve_queue
from runtime.adapters.memory.gate import BEFORE_APPLY
from runtime.errors import BrokerUnavailable, LedgerUnavailable, ProcessCrashed
from runtime.events.repair import TERMINAL_STEP_KINDS
from runtime.faults import CATALOGUE, CLAIM_COMMITTED, RECONCILE_STARTED, SETTLE_EVIDENCE_WRITTEN
from runtime.keys import hop_key, parse_hop_key
from runtime.models import DeliveryState, RunDelivery, RunStatus
from runtime.retry import RETRY_BUDGET_S
from runtime.seams import HopHandler, JobInfo, JobStatus
from runtime.worker import HopOutcome
from sim import ack_checks, retry_checks
from sim.clock import EPOCH
from sim.faults.plan import FaultKind, PlannedFault
from sim.pause import DEQUEUED, PAUSE_POINTS, pause

if TYPE_CHECKING:
    from sim.world import Boot, World

T = TypeVar("T")

LEDGER_READ = (FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_LATENCY, FaultKind.LEDGER_OUTAGE)
LEDGER_WRITE = (FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_AMBIGUOUS, FaultKind.LEDGER_LATENCY,
                FaultKind.LEDGER_OUTAGE)
PUBLISH = (FaultKind.PUBLISH_FAIL, FaultKind.ACK_LOST, FaultKind.DELAYED_DELIVERY)
DELIVER = (FaultKind.DUPLICATE_DELIVERY,)
STEP = (FaultKind.STEP_STALL, FaultKind.STEP_APPEND_FAIL)
STARTUP_STEP = (*STEP, FaultKind.STARTUP_STEP_FAIL)
"""A terminal Step appended while the boot reconciles: its own kind is rolled last (from
the side stream), so a world that never sets it draws exactly as before."""
STEP_FAILS = (FaultKind.STEP_APPEND_FAIL, FaultKind.STARTUP_STEP_FAIL)
STALLS = (FaultKind.BOOT_STALL, FaultKind.BOOT_PARTITION)
HOLDS = (FaultKind.PAUSE, *STALLS)
"""Faults that hold a boot at a point and then let it go on (sim.pause, zombies)."""
DRIFTS = (DeliveryState.CLAIMED, DeliveryState.SETTLED, DeliveryState.FAILED)
"""What a drifted delivery row reads as (chosen by the Run id: no random draw)."""
UNRECORDED_STARTS: tuple[float | None, ...] = (None, 0.0, math.inf)
"""Start times a START_UNRECORDED probe shows: none of them can be compared with a boot
cutoff (runtime.recovery.deliveries.trustworthy_start: present, finite, positive)."""


class _Gate:
    """The liveness gate of `_Guarded._guard` as a plain context manager, for the hot
    seam calls that inline `_guard` (after its thaw): the boot is checked alive, and
    the memory adapters' BEFORE_APPLY hook re-checks it right before any write, while
    the block runs. A class, not a coroutine: a ledger or broker call's checkpoints
    resume every coroutine frame it stacks, and this one adds none."""

    __slots__ = ("check", "token")

    def __init__(self, boot: Boot) -> None:
        self.check = boot.check_alive

    def __enter__(self) -> None:
        self.check()
        self.token = BEFORE_APPLY.set(self.check)

    def __exit__(self, *exc: object) -> None:
        BEFORE_APPLY.reset(self.token)


class _Guarded:
    def __init__(self, boot: Boot) -> None:
        self.boot = boot
        self.world = boot.world

    async def _hold(self) -> None:
        """A stalled boot's call waits until the boot thaws (FaultKind.BOOT_STALL)."""
        if self.boot.frozen:
            await self.boot.thaw()

    def _refuse_partitioned(self, name: str) -> None:
        """Only this boot cannot reach the database (FaultKind.BOOT_PARTITION)."""
        if self.boot.partitioned():
            raise LedgerUnavailable(f"boot {self.boot.number} is cut off from the database "
                                    f"until t={self.boot.partitioned_until:g}: {name}")

    async def _guard(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run `op` with the liveness gate installed for this task."""
        if self.boot.frozen:  # self._hold(), without a coroutine per call: the hot path
            await self.boot.thaw()
        with _Gate(self.boot):
            return await op()

    def _queued_at(self, run_id: UUID, seq: int) -> bool:
        """The world's truth: the Run waits QUEUED at exactly this sequence."""
        run = self.world.ledger.run_table.get(run_id)
        return run is not None and run.status is RunStatus.QUEUED and run.seq == seq

    def _startup_view(self, seen: set[str], key: str, point: str, kind: FaultKind) -> bool:
        """Whether this boot's view of `key` is out of step: once it was shown so
        (a fault fired during its startup reconciliation) it stays so for the
        boot's life; heal restores every view."""
        if self.world.injector.healed:
            return False
        if key in seen:
            return True
        if self.boot.lifespan.status.phase != "reconciling":
            return False
        fault, _ = self._fire(point, (kind,))
        if fault is not kind:
            return False
        seen.add(key)
        return True

    def _fire(self, point: str, kinds: tuple[FaultKind, ...]) -> tuple[FaultKind | None, float]:
        pf = self._hit(point, kinds)
        return (None, 0.0) if pf is None else (pf.fault, pf.amount)

    def _hit(self, point: str, kinds: tuple[FaultKind, ...]) -> PlannedFault | None:
        pf = self.world.injector.hit(point, kinds)
        if pf is None:
            return None
        extra = {"action": pf.action} if pf.action else {}
        self.world.trace.emit("faults", "fault.fired", point=point, fault=pf.fault,
                              amount=pf.amount, **extra)
        return pf

    async def _held(self, pf: PlannedFault, point: str, run_id: UUID | None) -> None:
        """The faults that hold a boot at a point and let it go on: a pause (an action
        fires meanwhile), a stall (a zombie) or a partition from the database."""
        if pf.fault is FaultKind.PAUSE and run_id is not None:
            await pause(self.boot, point, run_id, pf)
        elif pf.fault is FaultKind.BOOT_STALL:
            self.boot.stall(pf.amount)
            await self.boot.thaw()
        elif pf.fault is FaultKind.BOOT_PARTITION:
            self.boot.partition(pf.amount)
        elif pf.fault is FaultKind.SLOW_RECONCILE:
            # Not a stall: the boot stays live and reachable (Boot.unreachable is left
            # alone), so a peer that fences its work once it serves is at fault.
            await anyio.sleep(pf.amount)


LEDGER_READS = (
    "get_run", "get_delivery", "deliveries", "runs_in_session", "page_runs", "steps", "dump",
    "load_checkpoint", "get_consent", "consents_of", "get_agent_job", "agent_jobs_of",
    "checkpoint_debts", "evidence_debts", "late_fence_debts",
)
LEDGER_WRITES = (
    "admit_run", "release_held", "fail_held", "mark_published", "claim_delivery", "settle_run",
    "rotate_delivery", "fail_orphan", "fail_abandoned", "append_step", "save_checkpoint",
    "delete_checkpoint",
    "create_consent", "park_consent", "decide_consent", "cancel_consent",
    "readmit_after_consent", "create_agent_job", "record_agent_job", "park_delegate",
    "readmit_after_delegate", "park_service", "readmit_after_service", "await_hardware",
    "resume_hardware", "begin_cancel", "finish_cancel", "settle_late_fence",
)


READMITS = frozenset({"readmit_after_consent", "readmit_after_delegate",
                      "readmit_after_service"})
"""The owner-CAS re-admissions of a parked Run: each answered one goes to the checker
(startup_refired_true)."""


STEP_WRITES = frozenset({"append_step", "append_steps"})
"""The Step writer's appends: they meet its own faults (stall, failed append) and are
not traced as transactions (a hop's Steps would drown the trace)."""


STALE_HOP: ContextVar[str | None] = ContextVar("stale_hop", default=None)
"""The hop key a stale redelivery (FaultKind.STALE_REDELIVERY) runs under, in the
tasks of that redelivery only."""


class CheckpointStuck(LedgerUnavailable):
    """A checkpoint that cannot be deleted (a held lock, a storage fault): every
    deletion of that Run's checkpoint fails like this until heal."""


class SimLedger(_Guarded):
    """The Ledger seam of one boot: MemoryLedger plus storage faults.

    Every Ledger method is generated below from LEDGER_READS/LEDGER_WRITES:
    a read may see a transient error or latency; a write may also commit and
    then report an error (ambiguous commit). Committed writes go to the checker.
    """

    def __init__(self, boot: Boot, ledger: MemoryLedger) -> None:
        super().__init__(boot)
        self.inner = ledger

    def _notify_moved(self, run_id: str | None) -> None:
        """Wake a pending stale redelivery of this Run once its sequence moved on."""
        watch = self.world.seq_watch.get(run_id) if run_id else None
        if watch is None:
            return
        run = self.world.ledger.run_table.get(UUID(run_id))
        if run is None or run.seq != watch[0] or run.status.terminal:
            watch[1].set()

    def drift(self, d: RunDelivery | None) -> RunDelivery | None:
        """FaultKind.DELIVERY_DRIFT: a QUEUED Run's open delivery row, as this boot reads
        it, is out of step with the Run (the stored row is untouched)."""
        if d is None or d.state not in (DeliveryState.PENDING, DeliveryState.PUBLISHED) \
                or not self._queued_at(d.run_id, d.seq):
            return d
        fresh = d.key not in self.boot.drifted
        if not self._startup_view(self.boot.drifted, d.key, "ledger.delivery_row",
                                  FaultKind.DELIVERY_DRIFT):
            return d
        if fresh:
            self.world.checker.on_delivery_drift(self.boot.number, d.key)
        return d.model_copy(update={"state": DRIFTS[d.run_id.int % len(DRIFTS)]})

    # The boot registry (issue 15): no injected faults, so a world whose boots
    # never register (one live boot at a time) runs exactly as before it existed.

    async def register_boot(self, boot_id: str, lease_s: float, now: datetime) -> None:
        self.boot.check_alive()
        self._refuse_partitioned("register_boot")
        await self._guard(lambda: self.inner.register_boot(boot_id, lease_s, now))
        self.world.checker.on_lease_written(self.boot, now, None)

    async def renew_boot(self, boot_id: str, lease_s: float, now: datetime) -> bool:
        await self._hold()
        self.boot.check_alive()
        self.world.checker.on_renewal_asked(self.boot)
        self._refuse_partitioned("renew_boot")
        self._refuse_during_outage("renew_boot")
        renewed = await self._guard(lambda: self.inner.renew_boot(boot_id, lease_s, now))
        self.world.checker.on_lease_written(self.boot, now, renewed)
        if renewed:
            self.world.checker.on_hop_write(self.boot, "renew_boot", (boot_id,))
        return renewed

    async def boot_alive(self, boot_id: str, now: datetime) -> bool:
        self.boot.check_alive()
        self._refuse_partitioned("boot_alive")
        return await self._guard(lambda: self.inner.boot_alive(boot_id, now))


    def _refuse_stuck(self, run_id: str, fired: bool) -> None:
        """A stuck checkpoint refuses its deletion (nothing applied) until heal."""
        stuck = self.world.stuck_checkpoints
        if fired:
            stuck.add(run_id)
        if run_id in stuck and not self.world.injector.healed:
            raise CheckpointStuck(f"injected: the checkpoint of Run {run_id} cannot be deleted")

    def _may_stick(self, key: str | None) -> bool:
        """A claim of `key` may be stuck (FaultKind.CLAIM_STUCK) only while its Run waits
        QUEUED at that sequence, and never under a stale redelivery: a claim that already
        committed (an ambiguous commit, a duplicate) answers as it always did."""
        return key is not None and STALE_HOP.get() is None and self._queued_at(*parse_hop_key(key))

    def _refuse_stuck_claim(self, key: str, fired: bool) -> None:
        """A stuck delivery refuses every claim of it (nothing applied) until heal."""
        stuck = self.world.stuck_claims
        if fired:
            stuck.add(key)
            self.world.trace.emit("ledger", "claim.stuck", key=key)
        if key in stuck and not self.world.injector.healed:
            raise LedgerUnavailable(f"injected: the claim of delivery {key} keeps failing")

    def _refuse_during_outage(self, name: str) -> None:
        """While the database is down every call fails before it reaches it,
        whichever boot makes it; heal ends an outage at once."""
        if self.world.injector.healed or trio.current_time() >= self.world.ledger_down_until:
            return
        raise LedgerUnavailable(
            f"database unreachable (outage until t={self.world.ledger_down_until:g}): {name}"
        )

    async def _step_faults(self, name: str, args: tuple[Any, ...]) -> None:
        """The Step writer's own faults: a stalled or a failed append (and, for a
        terminal Step startup appends, FaultKind.STARTUP_STEP_FAIL)."""
        kinds: tuple[FaultKind, ...] = STEP
        if self.boot.lifespan.status.phase == "reconciling" and _terminal_step(name, args):
            kinds = STARTUP_STEP
        fault, amount = self._fire("steps.append", kinds)
        if fault is FaultKind.STEP_STALL:
            await anyio.sleep(amount)
        if fault in STEP_FAILS:
            raise LedgerUnavailable("injected Step append failure")


def _terminal_step(name: str, args: tuple[Any, ...]) -> bool:
    """Whether an append_step / append_steps call (positional, as the writer makes
    them: run, seq, kind or items, ...) carries a terminal Step."""
    if len(args) < 3:
        return False
    if name == "append_step":
        return args[2] in TERMINAL_STEP_KINDS
    return any(kind in TERMINAL_STEP_KINDS for kind, _ in args[2])


BLIPS = (FaultKind.LEDGER_OUTAGE, FaultKind.BOOT_PARTITION)


def spaced(world: World, kinds: tuple[FaultKind, ...]) -> tuple[FaultKind, ...]:
    """`kinds` without the blips (an outage, a partition) while the last blip ended less
    than RETRY_BUDGET_S ago: a blip is one stretch without the database, and an outage
    right after a partition (or during one) would cut a boot off for longer than a hop
    retries (found by the two_vessels scenario, swarm seed 180: a 17 s outage, then a
    24 s partition 0.4 s later, and the partitioned boot's hop failed its Run by a
    transient error after 30 s of retries, against transient_never_fails_a_run)."""
    if trio.current_time() < world.blips_ended() + RETRY_BUDGET_S:
        return tuple(k for k in kinds if k not in BLIPS)
    return kinds


_RUN_ATTRS = ("run_id", "id")
_HELD: dict[type, tuple[str, ...]] = {}
"""Per argument type: which of _RUN_ATTRS its instances can hold at all."""


def _held_attrs(kind: type) -> tuple[str, ...]:
    """The names of _RUN_ATTRS that `getattr` may find on an instance of `kind`.

    A pydantic model without extra fields has an attribute only as a field or on
    its class (a private one starts with an underscore), so the others are left
    out: looking them up went through pydantic's two `__getattr__` fallbacks and a
    raised AttributeError on every ledger call (about 1.4% of the swarm mix,
    py-spy). Any other type keeps both names: `getattr` decides, as before."""
    held = _HELD.get(kind)
    if held is None:
        fields = getattr(kind, "__pydantic_fields__", None)
        config = getattr(kind, "model_config", None)
        if isinstance(fields, dict) and isinstance(config, dict) \
                and config.get("extra") != "allow":
            held = tuple(a for a in _RUN_ATTRS if a in fields or hasattr(kind, a))
        else:
            held = _RUN_ATTRS
        _HELD[kind] = held
    return held


def _run_of(args: tuple[Any, ...]) -> str | None:
    """The Run a ledger call concerns, for the trace (first UUID or record argument)."""
    if not args:
        return None
    first = args[0]
    if isinstance(first, UUID):
        return str(first)
    for attr in _held_attrs(type(first)):
        value = getattr(first, attr, None)
        if isinstance(value, UUID):
            return str(value)
    return None


def _ledger_method(name: str, write: bool) -> Callable[..., Awaitable[Any]]:
    """The SimLedger method `name`: one coroutine from the runtime's call to the memory
    ledger's. A ledger call's every checkpoint resumes each coroutine frame it stacks,
    so the attempt (retry record, liveness, outage, partition and stuck-row refusals,
    the drawn fault) and the liveness gate are written inline here rather than as the
    nested coroutines they were; what runs, in which order, is unchanged."""
    is_claim = name == "claim_delivery"
    is_step = name in STEP_WRITES
    is_delete = name == "delete_checkpoint"
    is_published = name == "mark_published"
    point = f"ledger.{name}"
    tx_event = f"tx.{name}" if write and not is_step else None
    plain_kinds = LEDGER_WRITE if write else LEDGER_READ

    async def method(self: SimLedger, *args: Any, **kwargs: Any) -> Any:
        inner = getattr(self.inner, name)
        world = self.world
        boot = self.boot
        if is_published:
            ack_checks.on_mark_published(*args[:2])
        appender = None
        if is_step:
            if world.group_commit:
                # The caller's frame, before any await: the writer's queue as it took its group.
                world.checker.on_step_append(sys._getframe(1))
            appender = world.checker.on_step_started(sys._getframe(1), boot.id)
        elif name == "settle_run":
            world.checker.on_settle_started(sys._getframe(1), args, kwargs)
        try:
            claimed = hop_key(args[0], args[1]) if is_claim else None
            run_id = _run_of(args) if write else None  # only writes name it (trace, watches)
            attempt = retry_checks.attempt_began()  # the retry invariants time every attempt
            if is_claim:
                world.checker.mutation_checks.claim_began()
            try:
                if boot.frozen:  # self._hold(), inline (every ledger call passes here)
                    await boot.thaw()
                boot.check_alive()
                self._refuse_partitioned(name)
                self._refuse_during_outage(name)
                if is_step:
                    await self._step_faults(name, args)
                kinds = spaced(world, plain_kinds)  # blips spaced RETRY_BUDGET_S apart
                if is_delete:
                    kinds = (*kinds, FaultKind.CHECKPOINT_STUCK)
                if self._may_stick(claimed):
                    kinds = (*kinds, FaultKind.CLAIM_STUCK)
                fault, amount = self._fire(point, kinds)
                if fault is FaultKind.LEDGER_OUTAGE:
                    world.ledger_down_until = trio.current_time() + amount
                    self._refuse_during_outage(name)
                if is_delete and run_id is not None:
                    self._refuse_stuck(run_id, fault is FaultKind.CHECKPOINT_STUCK)
                if claimed is not None and self._may_stick(claimed):
                    self._refuse_stuck_claim(claimed, fault is FaultKind.CLAIM_STUCK)
                if fault is FaultKind.LEDGER_LATENCY:
                    await anyio.sleep(amount)
                if fault is FaultKind.LEDGER_TRANSIENT:
                    raise LedgerUnavailable(f"injected transient error before commit of {name}")
                # self._guard(op), inline: the liveness gate installed for this task
                if boot.frozen:
                    await boot.thaw()
                with _Gate(boot):
                    result = await inner(*args, **kwargs)
                checker = world.checker
                if write:
                    world.writer = boot
                    world.after_transaction(name)
                    checker.mutation_checks.wrote(name, result)
                if name == "settle_run":
                    checker.on_settled(boot, result)  # a read: no await, no draw
                if is_claim and getattr(result, "claimed", False):
                    checker.on_claim(boot.id, getattr(result, "delivery", None))
                if fault is FaultKind.LEDGER_AMBIGUOUS:
                    raise LedgerUnavailable(
                        f"injected ambiguous commit of {name}: applied, then lost")
            except LedgerUnavailable:
                if attempt is not None:
                    attempt.failed = trio.current_time()
                raise
        except BaseException:
            ack_checks.on_call_failed()
            raise
        finally:
            if appender is not None:
                world.checker.on_step_ended(appender)
        stale = STALE_HOP.get()
        if write and stale is not None:
            world.checker.on_stale_hop_write(stale, name, result)
        if write and world.seq_watch:
            self._notify_moved(run_id)
        if name == "get_delivery":
            result = self.drift(result)
            world.checker.on_delivery_read(result)
        if name == "page_runs":
            world.checker.on_page(boot.number, args[0], result,
                                  args[1] if len(args) > 1 else kwargs.get("after"))
        if tx_event is not None:
            changed = result is not None and result is not False
            world.trace.emit("ledger", tx_event, run_id=run_id, changed=changed)
            if changed and name in READMITS:
                world.checker.on_readmit(boot.number, args[0])
            if changed and world.leased:
                world.checker.on_hop_write(boot, name, args)
        elif write and world.leased and result is not None and result is not False:
            world.checker.on_hop_write(boot, name, args)
        return result

    method.__name__ = name
    return method


for _name in LEDGER_READS:
    setattr(SimLedger, _name, _ledger_method(_name, write=False))
for _name in LEDGER_WRITES:
    setattr(SimLedger, _name, _ledger_method(_name, write=True))


class SimBatchLedger(SimLedger):
    """A SimLedger that also offers `append_steps`, so the Step writer group-commits
    (runtime.events.writer.StepBatchLedger) as it does on PostgreSQL. Only worlds
    with `group_commit` set use it: the writer's grouping yields scheduler turns,
    so turning it on everywhere would change every scenario's trace."""


SimBatchLedger.append_steps = _ledger_method(  # type: ignore[attr-defined]
    "append_steps", write=True)


class SimBroker(_Guarded):
    """The Broker seam of one boot: MemoryBroker plus delivery faults."""

    def __init__(self, boot: Boot, broker: MemoryBroker) -> None:
        super().__init__(boot)
        self.inner = broker

    async def publish(
        self, queue: str, key: str, *, run_id: UUID, seq: int, priority: int, heartbeat: int
    ) -> bool:
        self.boot.check_alive()
        if not self._superseded_while_unreachable(run_id):
            # The caller's frame, before any await: the delivery its publisher read.
            self.world.checker.on_publish(key, run_id, seq, sys._getframe(1))
        if (stale := STALE_HOP.get()) is not None:
            self.world.checker.on_stale_hop_write(stale, f"publish {key}", True)
        fault, amount = self._fire("broker.publish", PUBLISH)
        if fault is FaultKind.PUBLISH_FAIL:
            raise BrokerUnavailable(f"injected publish failure for {key}")
        delay = amount if fault is FaultKind.DELAYED_DELIVERY else 0.0
        if fault is FaultKind.ACK_LOST and amount:
            await anyio.sleep(amount)  # still in flight: it lands later, if this boot lives
        if self.boot.frozen:
            await self.boot.thaw()
        with _Gate(self.boot):
            created = await self.inner.publish(
                queue, key, run_id=run_id, seq=seq, priority=priority, heartbeat=heartbeat,
                delay=delay,
            )
        self.world.trace.emit("broker", "job.published" if created else "job.deduplicated",
                              key=key, priority=priority)
        if created:
            self.world.checker.on_job_landed(key, run_id, seq, self.boot.number)
        await self._ack_in_flight()
        if fault is FaultKind.ACK_LOST:
            raise BrokerUnavailable(f"injected lost acknowledgement for {key}")
        return created

    async def _ack_in_flight(self) -> None:
        """FaultKind.ACK_IN_FLIGHT: the job has landed; its acknowledgement (or the error
        of a lost one) comes back only after `amount` virtual seconds, so a cancellation
        of the publisher (a graceful shutdown) can arrive in between and must still fence
        a job that landed behind its Run's cancellation (seed 000, "Cancellation,
        mutation, and recovery"). Not drawn at all when the kind is off, so a world
        without it runs exactly as before it existed."""
        injector = self.world.injector
        if injector.plan is None and injector.options.ack_in_flight_per_publish <= 0:
            return
        fault, amount = self._fire("broker.publish.ack", (FaultKind.ACK_IN_FLIGHT,))
        if fault is FaultKind.ACK_IN_FLIGHT and amount:
            await anyio.sleep(amount)

    def _superseded_while_unreachable(self, run_id: UUID) -> bool:
        """The Run's current generation was made while this boot was stalled or cut off:
        its publisher read the Run before that (a zombie), and the broker's dedupe and the
        claim fence answer its stale publish, not the publisher's own rule."""
        run = self.world.ledger.run_table.get(run_id)
        d = self.world.ledger.delivery_table.get((run_id, run.seq)) if run else None
        if d is None or not self.boot.unreachable:
            return False
        made = (d.created_at - EPOCH).total_seconds()
        return any(start <= made <= until for start, until in self.boot.unreachable)

    async def probe(self, key: str) -> JobInfo | None:
        self.world.checker.on_probe(self.boot.number, key, started=True)
        if self.boot.frozen:
            await self.boot.thaw()
        with _Gate(self.boot):
            probed = await self.inner.probe(key)
        info = self._unrecorded(probed)
        self.world.checker.on_probe(self.boot.number, key, info)
        return info

    def _unrecorded(self, info: JobInfo | None) -> JobInfo | None:
        """FaultKind.START_UNRECORDED: a QUEUED Run's active hop job, as this boot
        probes it, has no start time it can compare with its boot cutoff (the broker's
        own row keeps the true one): none, zero (a defaulted column) or infinite (a
        corrupt float), by the hop key (UNRECORDED_STARTS; no draw of its own)."""
        if info is None or info.status is not JobStatus.ACTIVE \
                or not self._queued_at(info.run_id, info.seq):
            return info
        fresh = info.key not in self.boot.unrecorded_starts
        if not self._startup_view(self.boot.unrecorded_starts, info.key, "broker.probe",
                                  FaultKind.START_UNRECORDED):
            return info
        if fresh:
            self.world.checker.on_start_unrecorded(self.boot.number, info.key)
        shown = UNRECORDED_STARTS[zlib.crc32(info.key.encode()) % len(UNRECORDED_STARTS)]
        return info.model_copy(update={"started_at": shown})

    async def abort(self, key: str, reason: str) -> JobInfo | None:
        self.boot.check_alive()
        self.world.checker.on_abort(self.boot.number, key)
        if self.world.leased:
            self.world.aborted_by[key] = self.boot.number
        fault, _ = self._fire("broker.abort", (FaultKind.ABORT_ACK_LOST,))
        if self.boot.frozen:
            await self.boot.thaw()
        with _Gate(self.boot):
            info = await self.inner.abort(key, reason)
        self._note_finished(key)
        self.world.trace.emit("broker", "job.abort", key=key,
                              status=info.status if info else None)
        if fault is FaultKind.ABORT_ACK_LOST:
            raise BrokerUnavailable(f"injected lost abort acknowledgement for {key}")
        return info

    async def touch(self, key: str) -> None:
        self.world.checker.hop_checks.touched(key)
        if self._touch_fails():
            raise BrokerUnavailable(f"injected heartbeat touch failure for {key}")
        if self.boot.frozen:
            await self.boot.thaw()
        with _Gate(self.boot):
            await self.inner.touch(key)

    def _touch_fails(self) -> bool:
        """FaultKind.TOUCH_FAIL: this heartbeat touch fails before the broker applies it.
        Not drawn at all when the kind is off, so a world without it runs exactly as
        before it existed (hop.outcome: the hop must outlive the failed touch)."""
        injector = self.world.injector
        if injector.plan is None and injector.options.touch_fail_per_touch <= 0:
            return False
        fault, _ = self._fire("broker.touch", (FaultKind.TOUCH_FAIL,))
        return fault is FaultKind.TOUCH_FAIL

    async def retire(self, key: str, reason: str) -> JobInfo | None:
        self.boot.check_alive()
        self.world.checker.on_abort(self.boot.number, key)  # a fence, like an abort
        ack_checks.on_retire(key)
        if self.boot.frozen:
            await self.boot.thaw()
        with _Gate(self.boot):
            info = await self.inner.retire(key, reason)
        self._note_finished(key)
        self.world.trace.emit("broker", "job.retired", key=key,
                              status=info.status if info else None)
        return info

    async def serve(
        self, queue: str, handler: HopHandler, concurrency: int, *, boot_id: str | None = None
    ) -> None:
        handler = self.world.checker.mutation_checks.watch_hop(self.boot.id, handler)

        async def deliver(run_id: UUID, seq: int) -> object:
            with self.world.checker.hop_checks.lane(self.boot.id, queue):
                return await deliver_once_or_twice(run_id, seq)

        async def deliver_once_or_twice(run_id: UUID, seq: int) -> object:
            pf = self._hit(DEQUEUED, spaced(self.world, (*DELIVER, *HOLDS)))
            fault = pf.fault if pf is not None else None
            if pf is not None and fault is not FaultKind.DUPLICATE_DELIVERY:
                await self._held(pf, DEQUEUED, run_id)
            if fault is not FaultKind.DUPLICATE_DELIVERY:
                outcome = await handler(run_id, seq)
                if outcome != HopOutcome.SKIPPED:  # a hop ran and finished
                    self._maybe_redeliver(handler, run_id, seq)
                return outcome
            async def once() -> None:
                await handler(run_id, seq)

            async with anyio.create_task_group() as tg:
                tg.start_soon(once)
                tg.start_soon(once)
            return None

        await serve_queue(self, queue, deliver, concurrency, boot_id=boot_id)

    def _maybe_redeliver(self, handler: HopHandler, run_id: UUID, seq: int) -> None:
        """FaultKind.STALE_REDELIVERY: the hop finished; its old key comes back later."""
        fault, amount = self._fire("broker.redeliver", (FaultKind.STALE_REDELIVERY,))
        if fault is FaultKind.STALE_REDELIVERY and self.boot.tg is not None:
            self.boot.tg.start_soon(self._redeliver, handler, run_id, seq, amount)

    async def _redeliver(self, handler: HopHandler, run_id: UUID, seq: int, delay: float) -> None:
        """Hand the finished hop's key to this boot's worker again after `delay`: a
        stale duplicate job. Everything it does runs marked stale (STALE_HOP), so
        the checker sees any write, publish or effect it makes."""
        moved = anyio.Event()
        self.world.seq_watch[str(run_id)] = (seq, moved)
        with anyio.move_on_after(delay):  # at the latest after `delay`; at once on rotation
            await moved.wait()
        if self.world.seq_watch.get(str(run_id), (None, None))[1] is moved:
            del self.world.seq_watch[str(run_id)]
        if not self.boot.alive:  # a fired redelivery still lands after heal, like a delay
            return
        run = self.world.ledger.run_table.get(run_id)
        key = hop_key(run_id, seq)
        self.world.trace.emit("broker", "job.redelivered", key=key,
                              moved_on=run is None or run.seq != seq or run.status.terminal)
        token = STALE_HOP.set(key)
        try:
            outcome = await handler(run_id, seq)
        finally:
            STALE_HOP.reset(token)
        self.world.checker.on_stale_hop_done(key, outcome)

    # -- primitives for serve_queue ---------------------------------------------

    async def dequeue(self, queue: str, boot_id: str | None = None) -> JobInfo | None:
        if self.boot.frozen:
            await self.boot.thaw()
        with _Gate(self.boot):
            job = await self.inner.dequeue(queue, boot_id)
        if job is not None:
            self.world.trace.emit("broker", "job.dequeued", key=job.key)
            if self.world.leased:
                self.world.taken_by[job.key] = self.boot.number
        return job

    async def finish(self, key: str, status: JobStatus, error: str | None = None) -> None:
        if self.boot.frozen:
            await self.boot.thaw()
        with _Gate(self.boot):
            await self.inner.finish(key, status, error)
        self._note_finished(key)

    def _note_finished(self, key: str) -> None:
        """Tell the checker when a job is first seen finished (cancel_completes reads it)."""
        job = self.inner.jobs.get(key)
        if job is not None and job.info.status.finished:
            self.world.checker.on_job_finished(key)

    async def sweep(self, queue: str) -> list[str]:
        if self.boot.frozen:
            await self.boot.thaw()
        with _Gate(self.boot):
            swept = await self.inner.sweep(queue)
        for key in swept:
            self._note_finished(key)
            self.world.trace.emit("broker", "job.swept", key=key)
            self.world.checker.on_swept(self.boot.number, key)
            self.world.checker.hop_checks.swept(key)
        return swept

    async def wait_for_work(self, queue: str, timeout: float) -> None:
        self.boot.check_alive()
        await self.inner.wait_for_work(queue, timeout)


class SimEffects(_Guarded):
    """The external effect sink, observed by the checker."""

    def __init__(self, boot: Boot, sink: MemoryEffectSink) -> None:
        super().__init__(boot)
        self.inner = sink

    async def apply(self, identity: str, run_id: UUID, seq: int, payload: dict[str, Any]) -> bool:
        self.boot.check_alive()
        self.world.checker.on_effect(identity, run_id, seq)
        if (stale := STALE_HOP.get()) is not None:
            self.world.checker.on_stale_hop_write(stale, f"effect {identity}", True)
        if self.boot.frozen:
            await self.boot.thaw()
        with _Gate(self.boot):
            applied = await self.inner.apply(identity, run_id, seq, payload)
        self.world.trace.emit("effects", "effect.call", identity=identity, seq=seq,
                              applied=applied)
        operator = self.world.actors.get("operator")
        if operator is not None and hasattr(operator, "after_effect"):
            await operator.after_effect(run_id)  # an operator acting at this exact point
        return applied


class SimFaultPoints(_Guarded):
    """FaultPoints of one boot: a crash at a catalogued point kills the boot."""

    async def point(self, name: str, **context: Any) -> None:
        self.boot.check_alive()
        if name not in CATALOGUE:
            raise AssertionError(f"fault point {name!r} is not catalogued in runtime.faults")
        if name == SETTLE_EVIDENCE_WRITTEN:
            self.world.checker.on_evidence_point(sys._getframe(1), self.boot.id)
        run_id = context.get("run_id")
        kinds = (FaultKind.CRASH, *HOLDS) if name in PAUSE_POINTS and run_id is not None \
            else (FaultKind.CRASH, *STALLS)
        if name == RECONCILE_STARTED:
            kinds = (*kinds, FaultKind.SLOW_RECONCILE)
        if self.boot.resumed_zombie:
            kinds = (*kinds, FaultKind.ZOMBIE_KILL)
        pf = self._hit(name, spaced(self.world, kinds))
        if pf is not None and pf.fault in (FaultKind.CRASH, FaultKind.ZOMBIE_KILL):
            self.world.checker.on_crash_point(name, self.boot.number, context)
            killed = "zombie killed" if pf.fault is FaultKind.ZOMBIE_KILL else "crash"
            self.boot.crash(f"{killed} at {name}")
            raise ProcessCrashed(name)
        if pf is not None:
            await self._held(pf, name, run_id)
            self.boot.check_alive()
        if name == RECONCILE_STARTED:
            self.world.checker.on_reconcile_started(self.boot.number)
        if name == CLAIM_COMMITTED:
            operator = self.world.actors.get("operator")
            if operator is not None and hasattr(operator, "after_claim"):
                await operator.after_claim(context["run_id"])  # an operator acting right here
