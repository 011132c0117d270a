"""The application spec: what a team puts under the simulator.

An `App` names the user's Patterns (a `WorkflowRegistry`, or a function of the
simulated environment that builds one), the external systems their nodes call
(`services`: fresh per simulation, durable across the Vessel's crashes, as a
payment provider outlives the process that called it), the `Workload` that
drives them, and the user's own `Invariant`s over the ledger and those systems.
Everything here is plain data; `harness.api.running` turns it into a
simulator scenario (sim.scenarios.Scenario) without copying the simulator.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from runtime.app.registry_ref import RegistryRefError, resolve_ref
from runtime.models import Consent, Run, Step
from runtime.registry import WorkflowRegistry

if TYPE_CHECKING:
    from sim.world import World


class AppError(Exception):
    """An `--app` reference that does not name an App: the message is one line."""


@dataclass
class Env:
    """One simulated environment, as the app's factories see it.

    `rng` is the app's own random stream (a pure function of the seed, apart from
    the simulator's streams), for latencies and failures of its external systems.
    `services` holds the systems built so far, by name. The app's own faults
    are drawn here, not in the simulator's fault plan: a replay of a seed (or of
    its shrunk plan under the same seed) draws them again identically.
    """

    seed: int
    rng: random.Random
    services: dict[str, Any] = field(default_factory=dict)
    faults_on: Callable[[], bool] = field(default=lambda: False, repr=False)
    """Whether faults are on now: the profile injects any, and heal has not begun."""

    def chance(self, p: float) -> bool:
        """A fault of the app's own systems (a lost response, a timeout): true with
        probability `p` while faults are on, never under the calm profile or after
        heal. Drawn from `rng`, so a seed replays the same faults."""
        if not self.faults_on():
            return False
        return self.rng.random() < p

    def service(self, name: str) -> Any:
        """The external system named `name`; KeyError names the known ones."""
        try:
            return self.services[name]
        except KeyError:
            known = ", ".join(sorted(self.services)) or "none"
            raise KeyError(f"no service {name!r}; known: {known}") from None


ContentFn = Callable[[random.Random, int], Mapping[str, Any]]
"""(workload rng, arrival index) -> the Intent's content."""


@dataclass(frozen=True)
class Arrival:
    """One kind of Intent the workload submits.

    `weight` is its share among arrivals; `keyed` the share carrying an
    idempotency key (keyed Intents are also replayed exactly, as a client that
    lost its answer retries); `sessions` the session names drawn for a share
    `in_session`; `priority` an inclusive range drawn for a share `prioritised`
    (otherwise the router's default); `held` the share submitted with a
    caller-retention hook (seed 000 'Admission and exact claim').
    """

    pattern: str
    content: ContentFn | Mapping[str, Any] = field(default_factory=dict)
    weight: float = 1.0
    keyed: float = 0.6
    sessions: tuple[str, ...] = ()
    in_session: float = 0.25
    priority: tuple[int, int] | None = None
    prioritised: float = 0.5
    held: float = 0.0

    def content_for(self, rng: random.Random, index: int) -> dict[str, Any]:
        if callable(self.content):
            return dict(self.content(rng, index))
        return dict(self.content)


@dataclass(frozen=True)
class Approvers:
    """People who decide the consents (AwaitConsent) the Patterns ask for.

    They think 1-30 virtual seconds, approve a share `approve` of verdicts, and
    misbehave as the fault profile says: slow, late, a repeated verdict, the
    wrong principal (sim.scenarios.people.Approver).
    """

    approve: float = 0.75


@dataclass(frozen=True)
class Workload:
    """Which Intents arrive, when, and who else acts in the world.

    `count` bounds the number of arrivals (drawn per seed), `mean_gap_s` the mean
    virtual time between them (exponential), `replays` the share of arrivals that
    repeat an earlier keyed Intent exactly. `approvers` decide consents;
    `cancels` is the share of operator passes that cancel a live Run (0: no
    operator). Delegated agent jobs, service attempts and hardware requests go
    to the simulator's own agent runtime, provider and orchestrator, which
    misbehave as the fault profile says.
    """

    arrivals: tuple[Arrival, ...]
    count: tuple[int, int] = (8, 20)
    mean_gap_s: float = 6.0
    replays: float = 0.15
    approvers: Approvers | None = None
    cancels: float = 0.0

    def __post_init__(self) -> None:
        if not self.arrivals:
            raise ValueError("a Workload needs at least one Arrival")
        low, high = self.count
        if not 1 <= low <= high:
            raise ValueError(f"Workload.count {self.count} must satisfy 1 <= low <= high")


@dataclass(frozen=True)
class View:
    """What an invariant may read: the ledger's records and the app's systems.

    `final` is True once the world is quiescent (after heal), False after an
    ordinary committed write.
    """

    world: World = field(repr=False)
    env: Env
    final: bool

    def runs(self, pattern: str | None = None) -> list[Run]:
        """Every Run in creation order (only those of `pattern` when given)."""
        runs = sorted(self.world.ledger.run_table.values(), key=lambda r: (r.created_at, r.id))
        return [r for r in runs if pattern is None or r.pattern == pattern]

    def run(self, run_id: UUID) -> Run | None:
        return self.world.ledger.run_table.get(run_id)

    def steps(self, run_id: UUID) -> list[Step]:
        """The Run's persisted Steps, in writer order."""
        return list(self.world.ledger.step_log.get(run_id, []))

    def consents(self) -> list[Consent]:
        return sorted(self.world.ledger.consent_table.values(), key=lambda c: (c.created_at, c.id))

    def effects(self) -> dict[str, dict[str, Any]]:
        """Effects applied through `ctx.effect`, by idempotency identity."""
        return self.world.effects.applied()

    def service(self, name: str) -> Any:
        return self.env.service(name)


Check = Callable[[View], str | None]
"""Returns None while the rule holds, else a one-line message saying what broke."""


@dataclass(frozen=True)
class Invariant:
    """A rule of the user's own over the ledger and the app's systems.

    `when="always"` checks after every committed ledger write and once at the
    end; `when="final"` only once the world is quiescent (say, every order is
    charged and shipped, or refunded).
    """

    name: str
    check: Check
    rule: str = ""
    when: Literal["always", "final"] = "always"


RegistryFn = Callable[[Env], WorkflowRegistry]
ServiceFn = Callable[[Env], Any]


@dataclass(frozen=True)
class App:
    """An application under test: its Patterns, systems, workload and invariants.

    `registry` is a registry or a function of the `Env` (so nodes can close over
    the simulated systems); `services` build, in order, the external systems of
    one simulation; `ref` is the `module:attribute` the CLI loaded it from,
    which replay commands and emitted tests name.
    """

    name: str
    registry: WorkflowRegistry | RegistryFn
    workload: Workload
    invariants: Sequence[Invariant] = ()
    services: Mapping[str, ServiceFn] = field(default_factory=dict)
    ref: str | None = None

    def __post_init__(self) -> None:
        if not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"App name {self.name!r}: use letters, digits, - and _")
        names = [i.name for i in self.invariants]
        if len(set(names)) != len(names):
            raise ValueError(f"App {self.name}: invariant names repeat: {names}")

    def build(self, env: Env) -> WorkflowRegistry:
        """Build the services into `env`, then the registry; check the workload's
        Patterns are registered (ValueError names the missing one)."""
        for name, make in self.services.items():
            env.services[name] = make(env)
        registry = self.registry if isinstance(self.registry, WorkflowRegistry) \
            else self.registry(env)
        known = registry.names()
        for arrival in self.workload.arrivals:
            if arrival.pattern not in known:
                raise ValueError(f"App {self.name}: the workload submits {arrival.pattern!r}, "
                                 f"which the registry lacks (it has {', '.join(known)})")
        return registry

    def serve_registry(self) -> WorkflowRegistry:
        """The registry a real Vessel serves (`vessel serve --app`, `harness receipts
        --app`): the app's systems built once for the process, under seed 0 and
        with faults never on, then its Patterns."""
        return self.build(Env(seed=0, rng=random.Random(0)))


def load_app(ref: str) -> App:
    """`package.module:attribute` -> the App it names (AppError otherwise).

    The current directory is importable, as for `python -m`; the attribute may
    be an App or a function of no arguments returning one.
    """
    try:
        target = resolve_ref(ref)
    except RegistryRefError as exc:
        raise AppError(str(exc)) from None
    if callable(target) and not isinstance(target, App):
        target = target()
    if not isinstance(target, App):
        attr = ref.partition(":")[2]
        raise AppError(f"--app {ref!r}: {attr} is a {type(target).__name__}, not a "
                       "harness.api.App")
    if target.ref is None:
        object.__setattr__(target, "ref", ref)
    return target
