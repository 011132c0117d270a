"""Scenarios for durable and live waits, and for cancellation.

- `consent`: Runs of `consent_gate` (one to four approval rounds, sometimes
  several approvals at once) decided by an approver who may be slow, late,
  repeat a verdict (then contradict it) or use the wrong principal, and whose two
  screens sometimes answer one consent at once, one each way (the CAS's loser is refused);
- `consent_batched`: the `consent` workload on a ledger that group-commits Steps
  (as PostgreSQL does), so Step writers batch and linger, and a parking hop's
  flush meets a writer still holding its lifecycle Steps;
- `delegate`: Runs of `delegate` whose agent jobs finish, fail or get lost;
- `hardware`: Runs of `hardware` needing up to ten capabilities, so budgets
  run out, with a slow or failing orchestrator;
- `service_wait`: Runs of `service_call` parked AWAITING_SERVICE on a
  ServiceJobAttempt@1 against the simulated provider (lost acknowledgements,
  duplicates, lying lookups, timeouts, refusals), some cancelled by an
  operator, the Vessel crashing between checkpoint, attempt, park and send;
- `cancel`: a mix of every pattern while an operator cancels Runs (a publish
  whose acknowledgement is lost stays in flight for a while first), often
  sending a cancel again at once (the re-read of a CANCELLED Run);
- `cancel_at_claim`: Runs whose hops perform external effects, half of whose
  claims are met by an operator's cancel while the hop is paused right after
  its claim committed (pause here, act, resume): the hop then runs its nodes
  for a Run gone CANCELLING and must create no effect;
- `cancel_children`: Runs parked on agent jobs and service attempts, or running,
  some (`errands`) owning several jobs and attempts of which the earlier are
  terminal, cancelled by an operator who targets exactly those while the agent runtime
  often refuses a cancel and abort acknowledgements are often lost; a cancel
  left CANCELLING is sent again until it settles (containment of children,
  the abort-acknowledgement path, the retried sweep);
- `skewed_sweep`: long hops while a second process whose clock runs ahead
  sweeps the broker, so a live hop's job reads aborted before the hop is
  stopped; an operator cancels most swept Runs at once (the canceller writes
  terminal evidence while that hop's Step writer is still attached) and
  leaves the others to the Vessel, whose relay must recover them in the same
  boot.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

import anyio

from runtime.adapters.memory.broker import MemoryBroker
from runtime.models import Run, RunStatus
from runtime.registry import QUEUES
from sim.checker import waits_without_proof
from sim.clock import VirtualClock
from sim.faults.options import FaultOptions
from sim.scenarios import Scenario, register
from sim.scenarios.people import Approver, Operator
from sim.scenarios.workload import settle_client, submit_stream
from sim.stasis_checks import ERRANDS_DEFAULT_ROUNDS
from sim.world import World

CAPABILITIES = ("gpu", "tts", "vision")


def content(world: World, pattern: str) -> dict[str, Any]:
    rng = world.streams.workload
    if pattern == "consent_gate":
        return {"rounds": rng.choice((1, 1, 2, 3, 4)),
                "approvals": 2 if rng.random() < 0.1 else 1}
    if pattern == "delegate":
        return {"task": rng.choice(("summarise", "translate", "search"))}
    if pattern == "service_call":
        return {"task": rng.choice(("render", "transcode", "synthesize"))}
    if pattern == "errands":
        # Two rounds are asked by naming none: the Pattern's declared default holds. The
        # content then says "no answers yet" (an empty one would become {"n": i}); the
        # draws and the rounds are what an explicit 2 gave.
        rounds = rng.choice((2, 3, 4))
        return {"answers": []} if rounds == ERRANDS_DEFAULT_ROUNDS else {"rounds": rounds}
    if pattern == "hardware":
        n = rng.choice((1, 2, 3, 4, 9, 10))
        cap = rng.choice(CAPABILITIES)
        needs = [cap if rng.random() < 0.5 else rng.choice(CAPABILITIES) for _ in range(n)]
        return {"needs": needs}
    return {}


async def _with_people(
    world: World, patterns: tuple[str, ...], operator: bool, reread: float = 0.0,
    at_claim: float = 0.0, contradict: float = 0.0,
) -> None:
    approver = Approver(world, contradict=contradict)
    world.actors["approver"] = approver
    async with anyio.create_task_group() as tg:
        tg.start_soon(approver.run)
        if operator:
            tg.start_soon(Operator(world, reread=reread, at_claim=at_claim).register().run,
                          anyio.current_time() + 400.0)
        await submit_stream(world, patterns, content)
        tg.cancel_scope.cancel()


async def heal(world: World) -> None:
    await settle_client(world)
    approver = world.actors.get("approver")
    if isinstance(approver, Approver):
        deadline = anyio.current_time() + 3600.0
        while anyio.current_time() < deadline and (
            approver.pending() or not all(r.status.terminal
                                          for r in world.ledger.run_table.values())
        ):
            await approver.pass_once()
            await anyio.sleep(5.0)


def _scenario(
    name: str,
    patterns: tuple[str, ...],
    operator: bool = False,
    tune: Callable[[FaultOptions], FaultOptions] | None = None,
    reread: float = 0.0,
    at_claim: float = 0.0,
    contradict: float = 0.0,
) -> Scenario:
    async def drive(world: World) -> None:
        await _with_people(world, patterns, operator, reread, at_claim, contradict)

    return register(Scenario(name, _describe(name), drive, heal, tune=tune))


PUBLISH_IN_FLIGHT_S = 30.0
CONTRADICTING_SCREENS = 0.15
"""consent: the share of verdicts two screens of the owner answer at once, one each way."""


def _publishes_in_flight(options: FaultOptions) -> FaultOptions:
    """A publish whose acknowledgement is lost stays in flight for a while, so the
    operator's cancellation can commit before its job lands (seed 000, the
    publisher that loses its acknowledgement after cancellation)."""
    return options.model_copy(update={"publish_in_flight_s": PUBLISH_IN_FLIGHT_S})


def _describe(name: str) -> str:
    for line in (__doc__ or "").split("- `")[1:]:
        if line.startswith(name + "`"):
            return " ".join(line.split(":", 1)[1].split()).rstrip(";")
    return name


CONSENT = _scenario("consent", ("consent_gate",), contradict=CONTRADICTING_SCREENS)


def _group_commit(world: World) -> None:
    world.group_commit = True  # Step writers batch their appends and linger, as on PostgreSQL


CONSENT_BATCHED = register(Scenario("consent_batched", _describe("consent_batched"),
                                    CONSENT.drive, heal, setup=_group_commit))
DELEGATE = _scenario("delegate", ("delegate",))


async def _service_drive(world: World) -> None:
    world.provider.configure(world.streams.workload)
    await _with_people(world, ("service_call",), operator=True)


async def _service_heal(world: World) -> None:
    """Lookups tell the truth again; wait until every Run is terminal or waits
    honestly on an attempt nothing can prove (the relay does the work)."""
    world.provider.heal()
    await settle_client(world)
    deadline = anyio.current_time() + 3600.0
    while anyio.current_time() < deadline and not all(
        r.status.terminal or waits_without_proof(world, r)
        for r in world.ledger.run_table.values()
    ):
        await anyio.sleep(5.0)


SERVICE_WAIT = register(
    Scenario("service_wait", _describe("service_wait"), _service_drive, _service_heal)
)
HARDWARE = _scenario("hardware", ("hardware",), tune=lambda o: _failing_touches(o))
CANCEL = _scenario(
    "cancel", ("echo", "two_step", "consent_gate", "delegate", "hardware", "effectful"),
    operator=True, tune=_publishes_in_flight, reread=1.0,
)

CANCEL_AT_CLAIM = _scenario(
    "cancel_at_claim", ("two_step", "effectful", "consent_gate", "delegate"), operator=True,
    at_claim=0.5,
)


CHILD_WAITS = (RunStatus.AWAITING_DELEGATE, RunStatus.AWAITING_SERVICE, RunStatus.RUNNING)
"""What the child-focused operator cancels: Runs whose containment has children or a hop."""


def _failing_touches(options: FaultOptions) -> FaultOptions:
    """Long `hardware` hops whose heartbeat touches fail now and then (a broker blip):
    a failed touch is retried next period and never ends the hop (hop.outcome)."""
    return options.model_copy(update={"touch_fail_per_touch": 0.3})


def _refusing_children(options: FaultOptions) -> FaultOptions:
    """Agent runtimes that refuse cancels and aborts whose acknowledgement is lost,
    often enough that every seed meets both on a cancel's own path."""
    return options.model_copy(update={
        "actor_fail_per_call": max(options.actor_fail_per_call, 0.3),
        "abort_ack_lost_per_abort": max(options.abort_ack_lost_per_abort, 0.3),
    })


async def _children_drive(world: World) -> None:
    world.provider.configure(world.streams.workload)
    operator = Operator(world, share=0.0, reread=0.3)
    async with anyio.create_task_group() as tg:
        until = anyio.current_time() + 400.0
        tg.start_soon(_child_canceller, world, operator, until)
        await submit_stream(world, ("delegate", "service_call", "two_step", "errands", "errands"),
                            content)
        # The canceller outlives the stream while errands are still on their later
        # rounds (the cancels that find settled children before a live one).
        while anyio.current_time() < until and any(
                r.pattern == "errands" and r.status in CHILD_WAITS
                for r in world.ledger.run_table.values()):
            await anyio.sleep(5.0)
        tg.cancel_scope.cancel()


async def _child_canceller(world: World, operator: Operator, until: float) -> None:
    """Cancel a Run waiting on a child (or running) every few seconds; repeat a cancel
    left CANCELLING a few times, as a caller polling its request would."""
    rng = world.streams.actors
    while anyio.current_time() < until:
        await anyio.sleep(round(rng.uniform(2.0, 10.0), 3))
        runs = sorted(world.ledger.run_table.values(), key=lambda r: (r.created_at, r.id))
        # An errand only once it is past its first round: its sweep must walk past
        # the settled children to the live one (a sweep that stops at the first
        # settled child leaves the live one running under CANCELLED).
        targets = [r.id for r in runs if r.status in CHILD_WAITS
                   and (r.pattern != "errands" or _errand_ripe(world, r))]
        if not targets:
            continue
        seasoned = [r for r in runs if r.id in targets and _settled_children(world, r.id)]
        if seasoned and rng.random() < SEASONED_SHARE:
            # A wait first, then a Run of it: a live agent job and a live attempt
            # behind settled ones are both met, however long either kind lasts.
            waits = sorted({r.status for r in seasoned}, key=lambda s: s.value)
            wait = rng.choice(waits)
            targets = [r.id for r in seasoned if r.status is wait]
        await cancel_until_settled(world, operator, rng.choice(targets), tries=3)


SEASONED_SHARE = 0.8
"""Share of the child canceller's picks made among Runs that already own a settled child."""


def _errand_ripe(world: World, run: Run) -> bool:
    """An errand is cancelled only past its first round; one of three rounds (odd
    `rounds`) only while it waits on a later attempt, so cancels at a later agent
    job do not use up every errand before its second attempt."""
    if not _settled_children(world, run.id):
        return False
    return run.intent.content.get("rounds", 2) % 2 == 0 or \
        run.status is RunStatus.AWAITING_SERVICE


def _settled_children(world: World, run_id: UUID) -> bool:
    """The Run owns a settled service attempt: an errand past its first round (its
    first agent job and attempt settled, the next job or attempt live)."""
    return any(a.owner.run_id == run_id and a.state.terminal
               for a in world.services.attempt_table.values())


async def cancel_until_settled(world: World, operator: Operator, run_id: UUID,
                               tries: int) -> None:
    """Cancel `run_id` up to `tries` times, 5 virtual seconds apart, while each
    answer leaves it CANCELLING (containment not yet proven)."""
    for _ in range(tries):
        await operator.cancel(run_id)
        run = world.ledger.run_table.get(run_id)
        if run is None or run.status is not RunStatus.CANCELLING:
            return
        await anyio.sleep(5.0)


CANCEL_CHILDREN = register(Scenario("cancel_children", _describe("cancel_children"),
                                    _children_drive, _service_heal, tune=_refusing_children))


SWEEP_SKEW_S = 200.0
"""How far the sweeping process's clock runs ahead: past the 120 s heartbeat."""
SWEPT_CANCEL_SHARE = 0.7
"""Share of swept Runs the operator cancels; the rest only the relay recovers."""


async def _skewed_drive(world: World) -> None:
    approver = Approver(world)
    world.actors["approver"] = approver
    operator = Operator(world, share=0.0, reread=0.3)
    async with anyio.create_task_group() as tg:
        tg.start_soon(approver.run)
        tg.start_soon(_skewed_sweeper, world, operator, anyio.current_time() + 400.0)
        await submit_stream(world, ("hardware", "two_step", "effectful"), content,
                            count=(8, 16))
        tg.cancel_scope.cancel()


async def _skewed_sweeper(world: World, operator: Operator, until: float) -> None:
    """Another process sweeps the same broker tables with a clock running ahead;
    the operator answers most swept jobs by cancelling their Run, repeating a
    cancel left CANCELLING until it settles. A swept Run left alone is the
    Vessel's to recover (its hop is gone, its job aborted under its claim)."""
    skewed = MemoryBroker(VirtualClock(world.clock.epoch + timedelta(seconds=SWEEP_SKEW_S)),
                          jobs=world.broker.jobs)
    rng = world.streams.actors
    while anyio.current_time() < until:
        await anyio.sleep(round(rng.uniform(5.0, 30.0), 3))
        if world.live_boot is None:
            continue
        swept = [key for queue in QUEUES for key in await skewed.sweep(queue)]
        for key in swept:
            world.trace.emit("sweeper", "job.swept.skewed", key=key)
        for key in swept:
            if rng.random() >= SWEPT_CANCEL_SHARE:
                continue
            await cancel_until_settled(world, operator, world.broker.jobs[key].info.run_id,
                                       tries=5)


SKEWED_SWEEP = register(
    Scenario("skewed_sweep", _describe("skewed_sweep"), _skewed_drive, heal)
)
