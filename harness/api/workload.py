"""An app's `Workload` as the simulator's external actors.

The arrivals go through the simulator's client (sim.scenarios.client: over the
process boundary, keeping what it still owes across crashes), consents to its
approver and cancellations to its operator (sim.scenarios.people), so an
application meets the same misbehaving world as the shipped scenarios.
"""

from __future__ import annotations

import random

import anyio

from harness.api.spec import Arrival, Workload
from runtime.models import Intent
from sim.scenarios.client import Client, Submit
from sim.scenarios.people import Approver, Operator
from sim.world import World

OPERATOR_S = 400.0
"""How long the operator keeps cancelling, from the start of the workload."""

HEAL_S = 3600.0
"""After heal, how long approvers keep deciding before the liveness check."""


def _pick(rng: random.Random, arrivals: tuple[Arrival, ...]) -> Arrival:
    return rng.choices(arrivals, weights=[a.weight for a in arrivals])[0]


def _intent(rng: random.Random, i: int, arrival: Arrival) -> Submit:
    keyed = rng.random() < arrival.keyed
    session = None
    if arrival.sessions and rng.random() < arrival.in_session:
        session = rng.choice(arrival.sessions)
    priority = None
    if arrival.priority is not None and rng.random() < arrival.prioritised:
        priority = rng.randint(*arrival.priority)
    intent = Intent(
        pattern=arrival.pattern,
        prompt=f"{arrival.pattern}-{i}",
        source="sim",
        sigil=rng.choice(("alice", "bob")),
        scopes=("runs:write",),
        content=arrival.content_for(rng, i),
        session=session,
        priority=priority,
        idempotency_key=f"{arrival.pattern}-key-{i}" if keyed else None,
    )
    return Submit(intent, held=rng.random() < arrival.held)


async def _submit(world: World, workload: Workload) -> None:
    rng = world.streams.workload
    client = Client(world, world.streams.actors)
    world.actors["client"] = client
    keyed: list[Submit] = []
    for i in range(rng.randint(*workload.count)):
        await anyio.sleep(round(rng.expovariate(1 / workload.mean_gap_s), 3))
        if keyed and rng.random() < workload.replays:
            sub = rng.choice(keyed)  # a client retrying an Intent it lost the answer to
        else:
            sub = _intent(rng, i, _pick(rng, workload.arrivals))
            if sub.intent.idempotency_key is not None:
                keyed.append(sub)
        await client.submit(sub)
        await client.settle_debts(attempts=1)


async def drive(world: World, workload: Workload) -> None:
    """The workload phase: arrivals, with approvers and an operator alongside."""
    async with anyio.create_task_group() as tg:
        if workload.approvers is not None:
            approver = Approver(world, approve=workload.approvers.approve)
            world.actors["approver"] = approver
            tg.start_soon(approver.run)
        if workload.cancels > 0:
            operator = Operator(world, share=workload.cancels).register()
            tg.start_soon(operator.run, anyio.current_time() + OPERATOR_S)
        await _submit(world, workload)
        tg.cancel_scope.cancel()


async def heal(world: World) -> None:
    """Faults are off: the client settles its debts, approvers decide what is pending."""
    client = world.actors.get("client")
    if isinstance(client, Client):
        await client.settle_debts()
    approver = world.actors.get("approver")
    if not isinstance(approver, Approver):
        return
    deadline = anyio.current_time() + HEAL_S
    while anyio.current_time() < deadline and (
        approver.pending()
        or not all(r.status.terminal for r in world.ledger.run_table.values())
    ):
        await approver.pass_once()
        await anyio.sleep(5.0)
