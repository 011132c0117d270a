"""Injectors as proxies around the seams one boot sees.

Each proxy first refuses any call from a dead boot (ProcessCrashed, no
effect), asks the Injector whether a fault fires at this operation, applies
it, and reports committed writes to the world (trace and checker). The
gate hook of the memory adapters re-checks liveness right before any write,
so a call that was parked when its boot died still has no effect.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import anyio

from runtime.adapters.memory import MemoryBroker, MemoryEffectSink, MemoryLedger
from runtime.adapters.memory.broker import serve_queue
from runtime.adapters.memory.gate import BEFORE_APPLY
from runtime.errors import BrokerUnavailable, LedgerUnavailable, ProcessCrashed
from runtime.faults import CATALOGUE
from runtime.models import (
    Admission,
    Claim,
    LedgerDump,
    Run,
    RunDelivery,
    RunStatus,
    Settlement,
    Step,
)
from runtime.seams import HopHandler, JobInfo, JobStatus
from sim.faults.plan import FaultKind

if TYPE_CHECKING:
    from sim.world import Boot

T = TypeVar("T")

LEDGER_READ = (FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_LATENCY)
LEDGER_WRITE = (FaultKind.LEDGER_TRANSIENT, FaultKind.LEDGER_AMBIGUOUS, FaultKind.LEDGER_LATENCY)
PUBLISH = (FaultKind.PUBLISH_FAIL, FaultKind.ACK_LOST, FaultKind.DELAYED_DELIVERY)
DELIVER = (FaultKind.DUPLICATE_DELIVERY,)


class _Guarded:
    def __init__(self, boot: Boot) -> None:
        self.boot = boot
        self.world = boot.world

    async def _guard(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run `op` with the liveness gate installed for this task."""
        self.boot.check_alive()
        token = BEFORE_APPLY.set(self.boot.check_alive)
        try:
            return await op()
        finally:
            BEFORE_APPLY.reset(token)

    def _fire(self, point: str, kinds: tuple[FaultKind, ...]) -> tuple[FaultKind | None, float]:
        pf = self.world.injector.hit(point, kinds)
        if pf is None:
            return None, 0.0
        self.world.trace.emit("faults", "fault.fired", point=point, fault=pf.fault,
                              amount=pf.amount)
        return pf.fault, pf.amount


class SimLedger(_Guarded):
    """The Ledger seam of one boot: MemoryLedger plus storage faults."""

    def __init__(self, boot: Boot, ledger: MemoryLedger) -> None:
        super().__init__(boot)
        self.inner = ledger

    async def _tx(self, name: str, write: bool, op: Callable[[], Awaitable[T]]) -> T:
        self.boot.check_alive()
        fault, amount = self._fire(f"ledger.{name}", LEDGER_WRITE if write else LEDGER_READ)
        if fault is FaultKind.LEDGER_LATENCY:
            await anyio.sleep(amount)
        if fault is FaultKind.LEDGER_TRANSIENT:
            raise LedgerUnavailable(f"injected transient error before commit of {name}")
        result = await self._guard(op)
        if write:
            self.world.after_transaction(name)
        if fault is FaultKind.LEDGER_AMBIGUOUS:
            raise LedgerUnavailable(f"injected ambiguous commit of {name}: applied, then lost")
        return result

    async def admit_run(self, run: Run, delivery: RunDelivery) -> Admission:
        return await self._tx("admit_run", True, lambda: self.inner.admit_run(run, delivery))

    async def get_run(self, run_id: UUID) -> Run | None:
        return await self._tx("get_run", False, lambda: self.inner.get_run(run_id))

    async def get_delivery(self, run_id: UUID, seq: int) -> RunDelivery | None:
        return await self._tx("get_delivery", False, lambda: self.inner.get_delivery(run_id, seq))

    async def deliveries(self, run_id: UUID) -> list[RunDelivery]:
        return await self._tx("deliveries", False, lambda: self.inner.deliveries(run_id))

    async def release_held(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        return await self._tx(
            "release_held", True, lambda: self.inner.release_held(run_id, seq, now)
        )

    async def fail_held(
        self, run_id: UUID, seq: int, reason: str, now: datetime
    ) -> RunDelivery | None:
        return await self._tx(
            "fail_held", True, lambda: self.inner.fail_held(run_id, seq, reason, now)
        )

    async def mark_published(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        return await self._tx(
            "mark_published", True, lambda: self.inner.mark_published(run_id, seq, now)
        )

    async def claim_delivery(
        self, run_id: UUID, seq: int, boot_id: str, token: str, now: datetime
    ) -> Claim:
        claim = await self._tx(
            "claim_delivery",
            True,
            lambda: self.inner.claim_delivery(run_id, seq, boot_id, token, now),
        )
        return claim

    async def settle_run(
        self, run_id: UUID, seq: int, settlement: Settlement, now: datetime
    ) -> Run | None:
        return await self._tx(
            "settle_run", True, lambda: self.inner.settle_run(run_id, seq, settlement, now)
        )

    async def rotate_delivery(self, run_id: UUID, seq: int, now: datetime) -> RunDelivery | None:
        return await self._tx(
            "rotate_delivery", True, lambda: self.inner.rotate_delivery(run_id, seq, now)
        )

    async def fail_orphan(
        self, run_id: UUID, seq: int, boot_id: str, reason: str, now: datetime
    ) -> Run | None:
        return await self._tx(
            "fail_orphan", True,
            lambda: self.inner.fail_orphan(run_id, seq, boot_id, reason, now),
        )

    async def runs_in_session(self, session: str, limit: int) -> list[Run]:
        return await self._tx(
            "runs_in_session", False, lambda: self.inner.runs_in_session(session, limit)
        )

    async def page_runs(
        self, statuses: Sequence[RunStatus], after: tuple[datetime, UUID] | None, limit: int
    ) -> list[Run]:
        return await self._tx(
            "page_runs", False, lambda: self.inner.page_runs(statuses, after, limit)
        )

    async def append_step(
        self, run_id: UUID, seq: int, kind: str, data: dict[str, Any], now: datetime
    ) -> Step:
        return await self._tx(
            "append_step", True, lambda: self.inner.append_step(run_id, seq, kind, data, now)
        )

    async def steps(self, run_id: UUID) -> list[Step]:
        return await self._tx("steps", False, lambda: self.inner.steps(run_id))

    async def dump(self) -> LedgerDump:
        return await self._tx("dump", False, self.inner.dump)


class SimBroker(_Guarded):
    """The Broker seam of one boot: MemoryBroker plus delivery faults."""

    def __init__(self, boot: Boot, broker: MemoryBroker) -> None:
        super().__init__(boot)
        self.inner = broker

    async def publish(
        self, queue: str, key: str, *, run_id: UUID, seq: int, priority: int, heartbeat: int
    ) -> bool:
        self.boot.check_alive()
        fault, amount = self._fire("broker.publish", PUBLISH)
        if fault is FaultKind.PUBLISH_FAIL:
            raise BrokerUnavailable(f"injected publish failure for {key}")
        delay = amount if fault is FaultKind.DELAYED_DELIVERY else 0.0
        created = await self._guard(
            lambda: self.inner.publish(
                queue, key, run_id=run_id, seq=seq, priority=priority, heartbeat=heartbeat,
                delay=delay,
            )
        )
        self.world.trace.emit("broker", "job.published" if created else "job.deduplicated",
                              key=key, priority=priority)
        if fault is FaultKind.ACK_LOST:
            raise BrokerUnavailable(f"injected lost acknowledgement for {key}")
        return created

    async def probe(self, key: str) -> JobInfo | None:
        return await self._guard(lambda: self.inner.probe(key))

    async def abort(self, key: str, reason: str) -> JobInfo | None:
        info = await self._guard(lambda: self.inner.abort(key, reason))
        self.world.trace.emit("broker", "job.abort", key=key,
                              status=info.status if info else None)
        return info

    async def touch(self, key: str) -> None:
        await self._guard(lambda: self.inner.touch(key))

    async def serve(self, queue: str, handler: HopHandler, concurrency: int) -> None:
        async def deliver(run_id: UUID, seq: int) -> object:
            fault, _ = self._fire("broker.deliver", DELIVER)
            if fault is not FaultKind.DUPLICATE_DELIVERY:
                return await handler(run_id, seq)
            async def once() -> None:
                await handler(run_id, seq)

            async with anyio.create_task_group() as tg:
                tg.start_soon(once)
                tg.start_soon(once)
            return None

        await serve_queue(self, queue, deliver, concurrency)

    # -- primitives for serve_queue ---------------------------------------------

    async def dequeue(self, queue: str) -> JobInfo | None:
        job = await self._guard(lambda: self.inner.dequeue(queue))
        if job is not None:
            self.world.trace.emit("broker", "job.dequeued", key=job.key)
        return job

    async def finish(self, key: str, status: JobStatus, error: str | None = None) -> None:
        await self._guard(lambda: self.inner.finish(key, status, error))

    async def sweep(self, queue: str) -> list[str]:
        swept = await self._guard(lambda: self.inner.sweep(queue))
        for key in swept:
            self.world.trace.emit("broker", "job.swept", key=key)
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
        applied = await self._guard(lambda: self.inner.apply(identity, run_id, seq, payload))
        self.world.trace.emit("effects", "effect.call", identity=identity, seq=seq,
                              applied=applied)
        return applied


class SimFaultPoints(_Guarded):
    """FaultPoints of one boot: a crash at a catalogued point kills the boot."""

    async def point(self, name: str, **context: Any) -> None:
        self.boot.check_alive()
        if name not in CATALOGUE:
            raise AssertionError(f"fault point {name!r} is not catalogued in runtime.faults")
        fault, _ = self._fire(name, (FaultKind.CRASH,))
        if fault is FaultKind.CRASH:
            self.boot.crash(f"crash at {name}")
            raise ProcessCrashed(name)
