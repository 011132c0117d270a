"""run_simulation: one seeded, deterministic simulation and its verdict.

Runs on trio with `sim_clock()` (MockClock at rate 0, autojump 0: virtual time jumps to
the next deadline whenever every task is blocked) and trio's deterministic
scheduling seeded from the seed, under freezegun kept equal to virtual time.
Phases: the scenario drives its actors with faults on; then heal (faults
off, actors settle what they owe); then run to quiescence or the liveness
deadline; then the final checks. A watchdog deadline turns a deadlock into
a verdict instead of a hang.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import trio
import trio.testing
from freezegun import freeze_time

from runtime.models import LedgerDump
from sim import breaks
from sim.checker import Violation
from sim.clock import EPOCH, real_perf_counter, sim_clock, virtual_time
from sim.faults.injector import Injector
from sim.faults.options import options_for
from sim.faults.plan import FaultPlan
from sim.loop import direct_trio, plain_deadline_updates, quick_shuffle, quiet_io
from sim.rng import Streams, stream
from sim.scenarios import Scenario, resolve
from sim.world import BootFailed, World

LIVENESS_DEADLINE_S = 3 * 3600.0
WATCHDOG_S = 12 * 3600.0
QUIESCENCE_POLL_S = 10.0


@dataclass
class SimResult:
    seed: int
    scenario: str
    profile: str
    verdict: str  # "ok" | "violation" | "deadlock" | "error"
    violation: Violation | None
    trace_hash: str
    trace_lines: list[str]
    coverage: dict[str, dict[str, int]]
    fired: FaultPlan
    runs: int
    """Runs simulated, plus leased jobs and service attempts in scenarios of workers."""
    boots: int
    virtual_s: float
    wall_s: float
    error: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    ledger: LedgerDump | None = None
    """The ledger at the end: for tests that assert a window's exact outcome."""
    jobs: dict[str, str] = field(default_factory=dict)
    effects: dict[str, int] = field(default_factory=dict)
    """Applications per effect identity."""
    world: World | None = field(default=None, repr=False)
    """The world at the end (stores, actors): for tests that inspect what was left."""

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def invariant(self) -> str | None:
        if self.violation is not None:
            return self.violation.invariant
        return None if self.ok else self.verdict


def _deterministic_scheduler(seed: int) -> None:
    """Seed trio's scheduler shuffle (private API; trio is pinned for this)."""
    run_mod = trio._core._run
    run_mod._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    run_mod._r.seed(seed)


_TERMINAL_STEPS = frozenset({"run.done", "run.failed", "run.cancelled"})


def _evidence_owed(world: World) -> bool:
    """Some terminal Run still lacks its terminal Step in the ledger.

    The worker's in-memory debts are not the only evidence still on its way:
    a request handler (a cancel whose Step append stalls across heal, crashloop
    seed 25 of the swarm profile) writes its Run's Step after CANCELLED
    committed, and owes nothing until that append fails. Quiescence waits for
    the durable state, as it does for checkpoint deletion; a Step that never
    lands still fails `terminal_evidence_once`, at the liveness deadline. Read
    from the tables, not `Ledger.evidence_debts`, which a break may blind."""
    ledger = world.ledger
    return any(
        run.status.terminal
        and not any(s.kind in _TERMINAL_STEPS for s in ledger.step_log.get(rid, ()))
        for rid, run in ledger.run_table.items()
    )


async def _quiescent(world: World, deadline: float, vessel: bool = True) -> bool:
    if not vessel:
        return True  # no Vessel: the scenario's heal drained its own processes
    while anyio.current_time() < deadline:
        await anyio.sleep(QUIESCENCE_POLL_S)
        boot = world.live_boot
        if boot is None:
            continue
        settled = all(r.status.terminal for r in world.ledger.run_table.values())
        if settled and boot.worker.in_flight == 0 and not boot.worker.evidence_debt \
                and not _evidence_owed(world) \
                and not world.ledger.checkpoint_table \
                and all(b.worker.in_flight == 0 and not b.worker.evidence_debt
                        for b in world.alive_boots()):  # the cleanup debt is paid too
            return True
    return False


async def _main(world: World, scenario: Scenario, outcome: dict[str, Any]) -> None:
    async with anyio.create_task_group() as tg:
        world.background = tg
        if scenario.vessel:
            tg.start_soon(world.run_boots)
            tg.start_soon(world.planned_time_crashes)

        async def stop_on_violation() -> None:
            await world.stop.wait()
            world.shutting_down = True
            tg.cancel_scope.cancel()

        tg.start_soon(stop_on_violation)
        await scenario.drive(world)
        world.injector.healed = True
        world.trace.emit("world", "heal")
        await scenario.heal(world)
        outcome["quiescent"] = await _quiescent(
            world, anyio.current_time() + LIVENESS_DEADLINE_S, scenario.vessel
        )
        world.checker.final(check_liveness=True)
        world.shutting_down = True
        tg.cancel_scope.cancel()


def run_simulation(
    seed: int,
    scenario: str | Scenario,
    profile: str = "default",
    plan: FaultPlan | None = None,
    *,
    break_name: str | None = None,
) -> SimResult:
    """Simulate `scenario` under `seed` with a fault profile, or exactly `plan`."""
    spec = resolve(scenario)[0] if isinstance(scenario, str) else scenario
    streams = Streams.from_seed(seed)
    options = options_for(profile, streams.faults, streams.swarm)
    if spec.tune is not None:
        options = spec.tune(options)
    injector = Injector(options=options, rng=streams.faults, plan=plan,
                        side=stream(seed, "stuck_claims"))
    _deterministic_scheduler(streams.scheduler.getrandbits(64))
    outcome: dict[str, Any] = {}
    verdict, error = "ok", None
    started = real_perf_counter()
    holder: dict[str, World] = {}
    with breaks.broken(break_name or breaks.from_env()), freeze_time(EPOCH) as frozen:

        async def entry() -> None:
            quiet_io()  # no syscall per loop turn: a simulation does no I/O (sim/loop.py)
            world = holder["world"] = World(seed=seed, streams=streams, injector=injector)
            if spec.setup is not None:
                spec.setup(world)
            with anyio.fail_after(WATCHDOG_S):
                await _main(world, spec, outcome)

        clock = sim_clock()
        virtual_time(frozen, clock)
        try:
            with plain_deadline_updates(), direct_trio(), quick_shuffle():  # sim/loop.py
                anyio.run(entry, backend="trio", backend_options={"clock": clock})
        except TimeoutError:
            verdict, error = "deadlock", f"watchdog: no quiescence within {WATCHDOG_S:g}s"
        except BaseExceptionGroup as group:
            verdict, error = _classify(group)
        except BootFailed as exc:
            verdict, error = "error", str(exc)
    wall = real_perf_counter() - started
    world = holder["world"]
    if world.checker.violations:
        verdict = "violation"
    virtual = world.trace_end()
    return SimResult(
        seed=seed,
        scenario=spec.name,
        profile="plan" if plan is not None else profile,
        verdict=verdict,
        violation=world.checker.violations[0] if world.checker.violations else None,
        trace_hash=world.trace.digest(),
        trace_lines=world.trace.lines,
        coverage=injector.coverage.as_dict(),
        fired=injector.recorded_plan(),
        runs=len(world.ledger.run_table) + world.work_items(),
        boots=len(world.boots),
        virtual_s=virtual,
        wall_s=wall,
        error=error,
        stats={"quiescent": outcome.get("quiescent"), "transactions": world.checker.transactions},
        ledger=world.ledger.dump_now(),
        jobs={k: v.value for k, v in world.broker.statuses().items()},
        effects=dict(Counter(c.identity for c in world.effects.calls if c.applied)),
        world=world,
    )


def _classify(group: BaseExceptionGroup[Any]) -> tuple[str, str]:
    timeouts, rest = group.split(TimeoutError)
    if timeouts is not None and rest is None:
        return "deadlock", f"watchdog: no quiescence within {WATCHDOG_S:g}s"
    first = rest.exceptions[0] if rest is not None else group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return "error", f"{type(first).__name__}: {first}"
