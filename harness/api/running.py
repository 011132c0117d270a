"""simulate, campaign, replay and shrink for an App, over the shipped simulator.

An App becomes one `sim.scenarios.Scenario` whose setup installs the app's
registry, systems, invariants and assertions in the freshly built world; the
kernel (sim.kernel.run_simulation), the campaign runner (sim.campaign) and the
shrinker (sim.shrink) then run it unchanged, so an app's seed is as
deterministic as a shipped scenario's: the same seed gives the same trace.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.api import probes, workload
from harness.api.probes import Probes
from harness.api.results import CampaignResult, SeedOutcome, ShrinkResult, SimulationResult
from harness.api.spec import App, Env, View, load_app
from sim import breaks
from sim.campaign import CampaignReport, run_campaign, summarize
from sim.checker import Invariant as CheckerInvariant
from sim.faults.options import PROFILES
from sim.faults.plan import FaultPlan
from sim.kernel import SimResult, run_simulation
from sim.rng import stream
from sim.scenarios import Scenario
from sim.shrink import shrink as shrink_plan
from sim.world import World

APP_STREAM = "app"
"""The app's own random stream (sim.rng.stream): apart from the simulator's."""


@dataclass
class AppState:
    """What an app leaves in its world (world.actors['app']): its env and probes."""

    env: Env
    probes: Probes


def check_app(app: App) -> None:
    """Build the app once outside any simulation: ValueError if it is inconsistent."""
    app.build(Env(seed=0, rng=random.Random(0)))


def scenario_of(app: App) -> Scenario:
    """The simulator scenario that runs `app` (not registered: it never joins 'all')."""

    async def drive(world: World) -> None:
        await workload.drive(world, app.workload)

    return Scenario(app.name, f"application {app.ref or app.name}", drive, workload.heal,
                    setup=lambda world: _install(app, world))


def _install(app: App, world: World) -> None:
    faulty = bool(world.injector.options.enabled())
    env = Env(seed=world.seed, rng=stream(world.seed, APP_STREAM),
              faults_on=lambda: faulty and not world.injector.healed)
    world.registry = app.build(env)
    state = AppState(env=env, probes=Probes(checker=world.checker))
    world.actors["app"] = state
    probes.activate(state.probes)
    checker = world.checker
    for inv in app.invariants:
        checker.app_invariants[inv.name] = CheckerInvariant(inv.name, inv.rule or inv.name,
                                                            f"application {app.name}")

    def check(final: bool) -> None:
        view = View(world=world, env=env, final=final)
        for inv in app.invariants:
            if inv.when == "final" and not final:
                continue
            try:
                message = inv.check(view)
            except Exception as exc:
                message = f"the check raised {type(exc).__name__}: {exc}"
            if message:
                checker.fail(inv.name, message)

    checker.app_checks.append(check)


def _profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")
    return profile


def replay_command(app: App, seed: int, profile: str, plan: Path | str | None = None) -> str:
    prefix = f"{breaks.ENV}={breaks.from_env()} " if breaks.from_env() else ""
    how = f"--plan {plan}" if plan else f"--profile {profile}"
    return f"{prefix}harness replay --app {app.ref or app.name} --seed {seed} {how}"


def shrink_command(app: App, seed: int, profile: str) -> str:
    return (f"harness shrink --app {app.ref or app.name} --seed {seed} --profile {profile} "
            f"--emit-test test_{_ident(app.name)}_seed_{seed}.py")


def _ident(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)


def _run(app: App, seed: int, profile: str, plan: FaultPlan | None,
         break_name: str | None) -> SimResult:
    try:
        return run_simulation(seed, scenario_of(app), profile, plan, break_name=break_name)
    finally:
        probes.activate(None)


def _typed(app: App, result: SimResult, plan_path: Path | str | None = None) -> SimulationResult:
    state = result.world.actors.get("app") if result.world is not None else None
    seen = state.probes if isinstance(state, AppState) else Probes()
    v = result.violation
    typed = SimulationResult(
        app=app.name, seed=result.seed, profile=result.profile,
        verdict=result.verdict,
        invariant=result.invariant, message=v.message if v else result.error,
        records=v.records if v else {}, trace_hash=result.trace_hash, runs=result.runs,
        boots=result.boots, virtual_s=result.virtual_s, wall_s=result.wall_s,
        plan=result.fired, sometimes=dict(seen.sometimes), always=dict(seen.always),
        effects=result.effects, replay=replay_command(app, result.seed, result.profile, plan_path),
    )
    typed._raw = result
    return typed


def simulate(app: App, seed: int, profile: str = "default", plan: FaultPlan | None = None,
             *, break_name: str | None = None) -> SimulationResult:
    """Run `app` under `seed` with a fault profile (calm, default, swarm), or exactly
    `plan`; every shipped invariant and the app's own are checked throughout."""
    _profile(profile)
    return _typed(app, _run(app, seed, profile, plan, break_name))


def replay(app: App, seed: int, profile: str = "default", plan: FaultPlan | Path | None = None
           ) -> SimulationResult:
    """Re-run one seed (or a saved plan) of `app`: the same trace as the first time."""
    path = plan if isinstance(plan, Path) else None
    loaded = FaultPlan.load(plan) if isinstance(plan, Path) else plan
    _profile(profile)
    return _typed(app, _run(app, seed, profile, loaded, None), path)


AppJob = tuple[int, "App | str", str, "str | None"]
"""(seed, the App or its module:attribute, profile, break): one campaign simulation."""

_LOADED: dict[str, App] = {}


def run_job(job: AppJob) -> dict[str, Any]:
    """One seed of an app, summarised as sim.campaign does, plus its assertions.

    Module-level, so spawned campaign workers can run it: they load the app by
    its `module:attribute` reference.
    """
    seed, target, profile, break_name = job
    if isinstance(target, str):
        target = _LOADED.setdefault(target, load_app(target))
    logging.disable(logging.CRITICAL)
    result = _typed(target, _run(target, seed, profile, None, break_name))
    summary = summarize(result._raw) if result._raw is not None else {}
    summary.update(sometimes=result.sometimes, always=result.always, replay=result.replay)
    return summary


def campaign_report(app: App, seeds: Iterable[int], profile: str = "default", jobs: int = 1,
                    on_result: Callable[[dict[str, Any]], None] | None = None
                    ) -> CampaignReport:
    """The campaign as sim.campaign reports it (for the CLI's reports)."""
    _profile(profile)
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    if jobs > 1 and app.ref is None:
        raise ValueError(f"App {app.name} has no module:attribute ref, so worker processes "
                         "cannot import it: load it with load_app() or set App.ref")
    target: App | str = app if jobs == 1 else str(app.ref)
    work: list[AppJob] = [(s, target, profile, breaks.from_env()) for s in seeds]
    return run_campaign(work, jobs, on_result, run=run_job)


def never_true(results: Iterable[dict[str, Any]]) -> list[str]:
    """sometimes() names reached in some seed and true in none."""
    seen: dict[str, bool] = {}
    for r in results:
        for name, ok in r.get("sometimes", {}).items():
            seen[name] = seen.get(name, False) or ok
    return sorted(name for name, ok in seen.items() if not ok)


def campaign(app: App, seeds: Iterable[int], profile: str = "default", jobs: int = 1
             ) -> CampaignResult:
    """Run `app` under every seed; failures carry their replay command."""
    rep = campaign_report(app, seeds, profile, jobs)
    outcomes = [
        SeedOutcome(seed=r["seed"], verdict=r["verdict"], invariant=r["invariant"],
                    message=r["message"], trace_hash=r["trace_hash"], runs=r["runs"],
                    virtual_s=r["virtual_s"], replay=r["replay"])
        for r in sorted(rep.results, key=lambda r: r["seed"])
    ]
    return CampaignResult(app=app.name, profile=profile, seeds=outcomes,
                          never_true=never_true(rep.results), wall_s=rep.wall_s)


def shrink(app: App, seed: int, profile: str = "default", plan: FaultPlan | None = None,
           save_to: Path | None = None) -> ShrinkResult | None:
    """The smallest fault plan that still breaks the seed's invariant (None: the seed
    passes). With `save_to`, the plan is written there and `replay` names it."""
    _profile(profile)

    def run(seed: int, scenario: Any, profile: str, plan: FaultPlan | None = None,
            *, break_name: str | None = None) -> SimResult:
        return _run(app, seed, profile, plan, break_name)

    found = shrink_plan(seed, app.name, profile, plan, break_name=breaks.from_env(), run=run)
    if found is None:
        return None
    path = save_to or Path(f"shrunk-{_ident(app.name)}-{seed}.json")
    if save_to is not None:
        found.plan.save(save_to)
    v = found.final.violation
    before = len(found.original.fired.faults) if plan is None else len(plan.faults)
    return ShrinkResult(
        app=app.name, seed=seed, profile=profile, invariant=found.final.invariant,
        message=v.message if v else found.final.error, faults_before=before, plan=found.plan,
        attempts=found.attempts, replay=replay_command(app, seed, profile, path),
        plan_path=str(path),
    )
