"""Scenario `rolling_upgrade`: a rolling upgrade shares the database. Clients
submit `echo` and `two_step` Runs as in `basic`, while a newer release's
admission path (a registry that also holds `echo` and `two_step` one version up)
admits some Runs pinned to versions this Vessel's boots do not hold. Their hops
reach a worker that must verify the pin and fail them as 'pinned Pattern
unavailable', never run another version (seed 000 'Admission and exact claim':
the worker verifies the pinned Pattern; seed 003 'Return makes a new claim')."""

from __future__ import annotations

from dataclasses import replace

import anyio

from runtime.engine import RunEngine
from runtime.errors import LedgerUnavailable, RuntimeEngineError
from runtime.models import Intent
from runtime.patterns import ECHO, TWO_STEP, default_registry
from runtime.registry import WorkflowRegistry
from sim.scenarios import Scenario, register
from sim.scenarios.workload import settle_client, submit_stream
from sim.world import Boot, Unavailable, World

UPGRADED = (ECHO, TWO_STEP)
"""The Patterns the newer release carries one version up."""


def newer_registry() -> WorkflowRegistry:
    """This release's Patterns plus the upgraded versions the old boots lack."""
    registry = default_registry()
    for pattern in UPGRADED:
        registry.register(replace(pattern, version=pattern.version + 1))
    return registry


class Upgrader:
    """Submits through a newer release's engine, sharing the live boot's seams: only
    the pinned versions differ from what that boot's own admission would write."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.registry = newer_registry()
        self.engines: dict[int, RunEngine] = {}

    def _engine(self, boot: Boot) -> RunEngine:
        engine = self.engines.get(boot.number)
        if engine is None:
            own = boot.engine
            engine = RunEngine(boot.deps, self.registry, router=own.router,
                               coordinator=own.coordinator, evidence_debt=own.evidence_debt)
            self.engines[boot.number] = engine
        return engine

    async def run(self, count: int) -> None:
        rng = self.world.streams.workload
        for i in range(count):
            await anyio.sleep(round(rng.uniform(1.0, 12.0), 3))
            pattern = rng.choice(UPGRADED).name
            intent = Intent(pattern=pattern, prompt=f"upgraded-{i}", source="sim",
                            sigil=rng.choice(("alice", "bob")), scopes=("runs:write",),
                            content={"n": i})
            outcome, run_id = await self._submit(intent)
            self.world.trace.emit("upgrader", "upgraded.submit", pattern=pattern,
                                  outcome=outcome, run_id=run_id)

    async def _submit(self, intent: Intent) -> tuple[str, str | None]:
        """One attempt, unkeyed: a lost answer is not retried (the relay publishes)."""
        checks = self.world.checker.admission_checks
        try:
            sub = await self.world.request(lambda boot: self._engine(boot).submit(intent))
        except (Unavailable, LedgerUnavailable, RuntimeEngineError) as exc:
            checks.pins_latest(self.registry, intent, None, exc)
            return type(exc).__name__, None
        checks.pins_latest(self.registry, intent, sub, None)
        return "admitted", str(sub.run.id)


async def drive(world: World) -> None:
    rng = world.streams.workload
    upgrader = Upgrader(world)
    world.actors["upgrader"] = upgrader
    async with anyio.create_task_group() as tg:
        tg.start_soon(upgrader.run, rng.randint(6, 12))
        await submit_stream(world, ("echo", "two_step"), count=(8, 16))


ROLLING_UPGRADE = register(Scenario("rolling_upgrade", __doc__ or "", drive, settle_client))
