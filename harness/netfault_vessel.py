"""A Vessel on PostgreSQL through a fault proxy: injection, recovery and the invariants after.

The pieces the network-fault tests (tests/contract/test_netfault.py) put
together, usable from any asyncio code:

- `Injector`: the Vessel's FaultPoints plus hooks around ledger and broker
  calls. It runs an action the nth time a *moment* is reached: a fault
  point name of `runtime.faults` (for example `claim.committed`, between
  durable steps), or `ledger.<method>` / `broker.<method>` (right before
  that call, for example `ledger.settle_run`, so the fault meets the
  transaction itself). It also records every error those calls raised, the
  evidence that a fault bit.
- `ToxicFault`: such an action. It adds a toxic to a proxy (through
  toxiproxy-python, off the event loop) and removes it again after `hold_s`
  on a timer thread, whatever the event loop is doing meanwhile.
- `proxied_vessel`: the PostgreSQL profile (ledger and SAQ queues) connected
  through the proxy's DSN, rewired so the engine, worker and lanes see the
  injector.
- `serving`: the Vessel's real lifespan (startup reconciliation, lanes,
  relays) for a block, as one boot.
- `admit`, `wait_terminal`: a client that replays its submission with the
  same idempotency key until it is admitted, and a bounded wait that
  tolerates a ledger that is still unavailable.
- `check_after_heal`: the invariants once the fault is gone (no Run lost,
  none duplicated, no effect applied twice), over `ledger.dump()` and the
  effect sink; an empty list means they hold.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast
from uuid import UUID

import anyio

from harness.netfault import NetFaults
from runtime.adapters.memory import MemoryEffectSink
from runtime.adapters.saq import SaqSettings
from runtime.app.lifespan import Lifespan, LifespanStatus
from runtime.app.profiles import Vessel, build_vessel, postgres_vessel
from runtime.engine import RunEngine, Submission, idempotent_run_id
from runtime.errors import BrokerUnavailable, LedgerUnavailable
from runtime.events.model import TERMINAL_KINDS
from runtime.faults import NoFaults
from runtime.models import DeliveryState, Intent, LedgerDump, Run, RunStatus
from runtime.retry import retried, unretried
from runtime.seams import Broker, FaultPoints, Ledger

log = logging.getLogger(__name__)

Action = Callable[[], Awaitable[None]]

TRANSIENT = (LedgerUnavailable, BrokerUnavailable, TimeoutError)
"""What a client of a faulty Vessel sees and answers by replaying its submission."""


# -- injection ----------------------------------------------------------------------------


@dataclass
class _Plan:
    nth: int
    action: Action


class Injector:
    """FaultPoints and ledger hooks that run an action at the nth hit of a moment."""

    def __init__(self, inner: FaultPoints | None = None) -> None:
        self.inner = inner or NoFaults()
        self.hits: Counter[str] = Counter()
        self.fired: list[str] = []
        self.errors: list[str] = []
        """`ledger.<method>: <error>` for every failed ledger or broker call (each attempt)."""
        self.action_errors: list[str] = []
        self._plans: dict[str, list[_Plan]] = {}

    def at(self, moment: str, action: Action, *, nth: int = 1) -> None:
        """Run `action` the `nth` time `moment` is reached (once)."""
        self._plans.setdefault(moment, []).append(_Plan(nth, action))

    async def reach(self, moment: str) -> None:
        """Run the actions due at this hit. An action that fails is recorded in
        `action_errors`, never raised into the Vessel: a broken injection is the
        test's problem, not a fault of the system under test."""
        self.hits[moment] += 1
        count = self.hits[moment]
        for plan in self._plans.get(moment, []):
            if plan.nth == count:
                self.fired.append(moment)
                try:
                    await plan.action()
                except Exception as exc:
                    log.error("fault action at %s failed: %r", moment, exc)
                    self.action_errors.append(f"{moment}: {exc!r}")

    def unfired(self) -> list[str]:
        """Moments with an action whose hit has not come yet."""
        return sorted(
            moment
            for moment, plans in self._plans.items()
            for plan in plans
            if self.hits[moment] < plan.nth
        )

    async def point(self, name: str, **context: Any) -> None:
        await self.reach(name)
        await self.inner.point(name, **context)

    def wrap_ledger(self, ledger: Ledger) -> Ledger:
        return cast(Ledger, _Hooked(ledger, self, "ledger"))

    def wrap_broker(self, broker: Broker) -> Broker:
        return cast(Broker, _Hooked(broker, self, "broker"))


class _Hooked:
    """Forwards to the real seam; reaches `<seam>.<method>` before each call, logs failures."""

    def __init__(self, inner: Any, injector: Injector, seam: str) -> None:
        self._inner = inner
        self._injector = injector
        self._seam = seam

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not inspect.iscoroutinefunction(attr):
            return attr
        moment = f"{self._seam}.{name}"

        async def call(*args: Any, **kwargs: Any) -> Any:
            await self._injector.reach(moment)
            try:
                return await attr(*args, **kwargs)
            except Exception as exc:
                self._injector.errors.append(f"{moment}: {type(exc).__name__}: {exc}"[:300])
                raise

        return call


@dataclass
class ToxicFault:
    """Add a toxic when called; remove it `hold_s` later (None: only on `heal`)."""

    faults: NetFaults
    proxy: Any
    kind: str
    hold_s: float | None = 1.0
    stream: str = "downstream"
    attributes: dict[str, int] = field(default_factory=dict)
    name: str = "injected"
    log: list[tuple[float, str]] = field(default_factory=list)
    _timer: threading.Timer | None = field(default=None, init=False, repr=False)
    _healed: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    async def __call__(self) -> None:
        await anyio.to_thread.run_sync(self.add)

    def add(self) -> None:
        self.faults.add(
            self.proxy, self.kind, stream=self.stream, name=self.name, **self.attributes
        )
        self.log.append((time.monotonic(), f"added {self.kind} {self.attributes}"))
        if self.hold_s is not None:
            self._timer = threading.Timer(self.hold_s, self.heal)
            self._timer.daemon = True
            self._timer.start()

    def heal(self) -> None:
        """Remove the toxic now (idempotent); a pending timer is cancelled."""
        timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        self.faults.remove(self.proxy, self.name)
        self.log.append((time.monotonic(), f"removed {self.kind}"))
        self._healed.set()

    def wait_healed(self, timeout_s: float) -> bool:
        """Block until the toxic was removed (by its timer or `heal`); False on timeout."""
        return self._healed.wait(timeout_s)


# -- the Vessel through the proxy ---------------------------------------------------------


FAST_SAQ = SaqSettings(connect_timeout_s=3.0, stop_deadline_s=15.0, cancel_deadline_s=2.0)
"""SAQ bounds for tests: a broken pool gives up in seconds and a stop is bounded."""


@asynccontextmanager
async def proxied_vessel(
    dsn: str,
    injector: Injector,
    *,
    effects: MemoryEffectSink | None = None,
    concurrency: dict[str, int] | None = None,
    saq_settings: SaqSettings | None = None,
    migrate: bool = True,
) -> AsyncIterator[Vessel]:
    """The PostgreSQL profile on `dsn` (a proxied DSN), with `injector` wired in."""
    concurrency = concurrency or {"runs": 2, "rites": 1}
    async with postgres_vessel(
        dsn,
        migrate=migrate,
        effects=effects or MemoryEffectSink(),
        concurrency=concurrency,
        saq_settings=saq_settings or FAST_SAQ,
    ) as plain:
        # The hook sits under the profile's retries: it sees (and logs) every
        # real call that failed, including the ones a retry then outlasted.
        hooked = injector.wrap_ledger(unretried(plain.deps.ledger))
        deps = dataclasses.replace(
            plain.deps,
            ledger=retried(hooked, plain.deps.entropy),
            broker=injector.wrap_broker(plain.deps.broker),
            faults=injector,
        )
        yield build_vessel(deps, registry=plain.registry, concurrency=concurrency)


def next_boot(vessel: Vessel, boot_id: str, concurrency: dict[str, int] | None = None) -> Vessel:
    """The same ledger, queues and effect sink as a new process incarnation, no faults.

    Unwraps the injector's hooks; the caller must have stopped the previous
    boot's lanes (a new process would not share them either).
    """
    ledger, broker = unretried(vessel.deps.ledger), vessel.deps.broker
    deps = dataclasses.replace(
        vessel.deps,
        ledger=retried(ledger._inner if isinstance(ledger, _Hooked) else ledger,
                       vessel.deps.entropy),
        broker=broker._inner if isinstance(broker, _Hooked) else broker,
        faults=NoFaults(),
        boot_id=boot_id,
    )
    return build_vessel(deps, registry=vessel.registry, concurrency=concurrency)


@asynccontextmanager
async def serving(vessel: Vessel, relay_every_s: float = 0.5) -> AsyncIterator[LifespanStatus]:
    """One boot: startup reconciliation, lanes and relays (strict, as on PostgreSQL)."""
    async with Lifespan(vessel, strict=True, relay_every_s=relay_every_s).serving() as status:
        yield status


# -- the client ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    key: str
    outcome: str
    """`admitted`, or the error's type and message."""
    elapsed_s: float


@dataclass
class ClientLog:
    """What the client saw: one entry per attempt, and the Runs it was finally given."""

    attempts: list[Attempt] = field(default_factory=list)
    admitted: dict[str, Submission] = field(default_factory=dict)

    @property
    def failures(self) -> list[Attempt]:
        return [a for a in self.attempts if a.outcome != "admitted"]


async def admit(
    engine: RunEngine,
    intent: Intent,
    log_to: ClientLog,
    *,
    within_s: float = 25.0,
    attempt_s: float = 15.0,
    pause_s: float = 0.3,
) -> Submission:
    """Submit until admitted, replaying with the same idempotency key after each failure.

    Each attempt has its own deadline (`attempt_s`): the ledger sets none on
    its own transactions, so a black-holed connection waits until the
    caller gives up.
    """
    key = intent.idempotency_key
    if key is None:
        raise ValueError("admit() replays by idempotency key; the Intent needs one")
    deadline = time.monotonic() + within_s
    while True:
        started = time.monotonic()
        try:
            with anyio.fail_after(attempt_s):
                submission = await engine.submit(intent)
        except TRANSIENT as exc:
            outcome = f"{type(exc).__name__}: {exc}"[:200]
            log_to.attempts.append(Attempt(key, outcome, time.monotonic() - started))
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(pause_s)
            continue
        log_to.attempts.append(Attempt(key, "admitted", time.monotonic() - started))
        log_to.admitted[key] = submission
        return submission


async def wait_terminal(
    ledger: Ledger, run_ids: Iterable[UUID], within_s: float = 20.0, every_s: float = 0.1
) -> dict[UUID, Run | None]:
    """The latest view of each Run once all are terminal or `within_s` passed."""
    latest: dict[UUID, Run | None] = dict.fromkeys(run_ids)
    with anyio.move_on_after(within_s):
        while True:
            for run_id, run in list(latest.items()):
                if run is not None and run.status.terminal:
                    continue
                with contextlib.suppress(*TRANSIENT):
                    latest[run_id] = await ledger.get_run(run_id)
            if all(r is not None and r.status.terminal for r in latest.values()):
                break
            await anyio.sleep(every_s)
    return latest


# -- the invariants -----------------------------------------------------------------------


def check_after_heal(
    dump: LedgerDump,
    effects: MemoryEffectSink,
    intents: Iterable[Intent],
    *,
    effectful: Iterable[str] = ("two_step",),
    evidence_repaired: bool = True,
) -> list[str]:
    """Violations of the after-heal invariants; empty when they hold.

    - no Run lost: every submitted idempotency key has its Run, and every
      Run in the ledger is terminal;
    - none duplicated: one Run per key, with the server-owned id for it;
    - deliveries: sequences 0..n without gaps, the Run at the newest, that
      one closed, at most one SETTLED;
    - effects: each identity applied at most once; a DONE Run of an
      `effectful` Pattern has had its effect applied;
    - evidence: at most one terminal Step per Run, exactly one once a
      reconciliation has repaired it (`evidence_repaired`).
    """
    problems: list[str] = []
    runs = {run.id: run for run in dump.runs}
    by_key: dict[tuple[str | None, str], list[Run]] = {}
    for run in dump.runs:
        if run.idempotency_key is not None:
            by_key.setdefault((run.idempotency_scope, run.idempotency_key), []).append(run)
    for intent in intents:
        expected = idempotent_run_id(intent)
        scope = f"{intent.source}:{intent.sigil}"
        found = by_key.get((scope, intent.idempotency_key or ""), [])
        if not found:
            problems.append(f"lost: key {intent.idempotency_key!r} has no Run")
        elif len(found) > 1:
            problems.append(f"duplicated: key {intent.idempotency_key!r} has {len(found)} Runs")
        elif found[0].id != expected:
            problems.append(f"key {intent.idempotency_key!r} admitted Run {found[0].id}, "
                            f"expected {expected}")
    for run in dump.runs:
        if not run.status.terminal:
            problems.append(f"not terminal after heal: Run {run.id} is {run.status.value}")

    deliveries: dict[UUID, list[Any]] = {}
    for d in dump.deliveries:
        deliveries.setdefault(d.run_id, []).append(d)
    for run_id, run in runs.items():
        mine = sorted(deliveries.get(run_id, []), key=lambda d: d.seq)
        seqs = [d.seq for d in mine]
        if seqs != list(range(len(seqs))) or not seqs or seqs[-1] != run.seq:
            problems.append(f"Run {run_id}: delivery sequences {seqs}, Run at {run.seq}")
            continue
        settled = [d.seq for d in mine if d.state is DeliveryState.SETTLED]
        if len(settled) > 1:
            problems.append(f"Run {run_id}: settled at {len(settled)} sequences {settled}")
        if run.status.terminal and not mine[-1].state.closed:
            problems.append(f"Run {run_id} is {run.status.value} with its delivery "
                            f"{run.seq} still {mine[-1].state.value}")

    applied = Counter(c.identity for c in effects.calls if c.applied)
    for identity, n in sorted(applied.items()):
        if n > 1:
            problems.append(f"effect {identity} applied {n} times")
    for call in effects.calls:
        if call.run_id not in runs:
            problems.append(f"effect {call.identity} for a Run the ledger does not hold")
    applied_runs = {c.run_id for c in effects.calls if c.applied}
    patterns = set(effectful)
    for run in dump.runs:
        if run.status is RunStatus.DONE and run.pattern in patterns and run.id not in applied_runs:
            problems.append(f"Run {run.id} is DONE but its effect was never applied")

    terminal_steps = Counter(s.run_id for s in dump.steps if s.kind in TERMINAL_KINDS)
    for run in dump.runs:
        n = terminal_steps.get(run.id, 0)
        if n > 1 or (evidence_repaired and run.status.terminal and n != 1):
            problems.append(f"Run {run.id} ({run.status.value}) has {n} terminal Steps")
    return problems
