"""Unit-test one node: `run_node` runs a single node of a Pattern under virtual time.

The node gets a real `HopContext` over an in-memory world (a memory ledger
holding its Run as RUNNING, a recording effect sink, a seeded entropy and a
virtual clock), so `ctx.effect`, `ctx.effect_identity`, `ctx.token` and
`ctx.consent` behave as in a Vessel. Time is virtual, as in the simulator:
`anyio.sleep(3600)` in the node or in the app's systems returns at once with
the clock an hour later, and `datetime.now()` reads the same virtual clock.
With an `App`, its systems are built first (`faults=True` turns their
`Env.chance` faults on), and `result.service(name)` reads them afterwards.

`always` and `unreachable` in the node are checked: a false one fails the call
with AssertionError naming it, after the node returned.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import anyio
from freezegun import freeze_time

from harness.api import probes
from harness.api.probes import Probes
from harness.api.spec import App, Env
from runtime.graph.transitions import End, Goto
from runtime.hop import HopContext
from runtime.models import Consent, ConsentStatus, Intent, Run, RunStatus
from runtime.registry import WorkflowRegistry

RUN_ID = UUID(int=1, version=4)
"""The Run every `run_node` call runs under: effect identities are stable across calls."""
APPROVER = "approver"


@dataclass
class NodeRun:
    """What one node did: its new state and transition, and what it touched."""

    state: Any
    transition: Any
    """The node's transition; a node that returned only a state gets the one the
    runner would give it (Goto the next node, or End after the last)."""
    virtual_s: float
    """Virtual seconds the node took (its sleeps and its systems' latencies)."""
    started_at: datetime
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Effects applied through `ctx.effect`, by idempotency identity."""
    tokens: list[str] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    always: dict[str, int] = field(default_factory=dict)
    sometimes: dict[str, bool] = field(default_factory=dict)
    env: Env | None = None

    def service(self, name: str) -> Any:
        """The app's system `name`, as the node left it."""
        if self.env is None:
            raise KeyError(f"no service {name!r}: run_node was given a registry, not an App")
        return self.env.service(name)


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def publish(self, kind: str, data: Mapping[str, Any] | None = None) -> None:
        self.events.append((kind, dict(data or {})))


class _Strict(Probes):
    """Probes that keep violations for the caller instead of a simulator checker."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []

    def violate(self, name: str, rule: str, message: str, **details: Any) -> None:
        extra = f" {details}" if details else ""
        self.violations.append(f"{message}{extra}")


def run_node(
    app: App | WorkflowRegistry, pattern: str, node: str, state: Any, *,
    seed: int = 0, faults: bool = False, consent: ConsentStatus | None = None,
    seq: int = 0, content: Mapping[str, Any] | None = None, timeout_s: float = 86_400.0,
) -> NodeRun:
    """Run node `node` of Pattern `pattern` once on `state` under virtual time.

    `state` may be the Pattern's state model or its JSON dict. `consent`: the
    node resumes from a consent decided so (`ctx.consent`). `seq` is the hop's
    sequence, `content` the Intent's content (default: the state's JSON form).
    `seed` drives the app's `Env.rng` and the ids; the same call gives the same
    result. TimeoutError if the node takes more than `timeout_s` virtual seconds.
    """
    from runtime.adapters.memory.broker import MemoryBroker
    from runtime.adapters.memory.effects import MemoryEffectSink
    from runtime.adapters.memory.ledger import MemoryLedger
    from runtime.app.profiles import make_deps
    from sim.clock import EPOCH, VirtualClock, sim_clock, virtual_time
    from sim.rng import SeededEntropy

    env: Env | None = None
    if isinstance(app, App):
        env = Env(seed=seed, rng=random.Random(seed), faults_on=lambda: faults)
        registry = app.build(env)
    else:
        registry = app
    found = registry.latest(pattern)
    step = found.node(node)  # KeyError names the node
    typed = found.decode(dict(state)) if isinstance(state, Mapping) else state
    intent = Intent(pattern=pattern, content=dict(content if content is not None
                                                   else found.encode(typed)))
    clock = VirtualClock()
    recorder = _Recorder()
    strict = _Strict()
    sink = MemoryEffectSink()
    holder: dict[str, Any] = {}

    async def entry() -> None:
        now = clock.now()
        run = Run(id=RUN_ID, pattern=pattern, pattern_version=found.version, queue="runs",
                  priority=50, status=RunStatus.RUNNING, seq=seq,
                  fingerprint=intent.fingerprint(), intent=intent, created_at=now,
                  updated_at=now, started_at=now)
        ledger = MemoryLedger()
        ledger.run_table[run.id] = run
        deps = make_deps(ledger, MemoryBroker(clock), clock=clock, effects=sink,
                         entropy=SeededEntropy(random.Random(seed)), boot_id="run-node")
        decided = None if consent is None else Consent(
            id=UUID(int=2, version=4), run_id=run.id, seq=max(0, seq - 1), node=node,
            owner=APPROVER, status=consent, decided_by=APPROVER, decided_at=now,
            created_at=now)
        ctx = HopContext(deps=deps, run=run, seq=seq, consent=decided, events=recorder)
        with anyio.fail_after(timeout_s):
            holder["outcome"] = await step.run(ctx, typed)
        holder["virtual_s"] = anyio.current_time()

    probes.activate(strict)
    try:
        with freeze_time(EPOCH) as frozen:
            trio_clock = sim_clock()
            virtual_time(frozen, trio_clock)
            anyio.run(entry, backend="trio", backend_options={"clock": trio_clock})
    finally:
        probes.activate(None)
    if strict.violations:
        raise AssertionError(f"node {pattern}.{node}: " + "; ".join(strict.violations))
    outcome = holder["outcome"]
    if isinstance(outcome, tuple):
        new_state, transition = outcome
    else:
        following = found.after(node)
        new_state = outcome
        transition = Goto(following) if following is not None else End(
            result=found.encode(outcome))
    return NodeRun(
        state=new_state, transition=transition, virtual_s=holder["virtual_s"],
        started_at=EPOCH, effects=sink.applied(),
        tokens=[str(d.get("text", "")) for k, d in recorder.events if k == "token"],
        events=[(k, d) for k, d in recorder.events if k != "token"],
        always=dict(strict.always), sometimes=dict(strict.sometimes), env=env,
    )
