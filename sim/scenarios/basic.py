"""Scenario `basic`: clients submit `echo` and `two_step` Runs with random
priorities, sessions and idempotency keys, including exact replays and
conflicting reuse, some with a caller-retention hook, under crashes and faults."""

from __future__ import annotations

import anyio

from runtime.models import Intent
from sim.scenarios import Scenario, register
from sim.scenarios.client import Client, Submit
from sim.world import World

SESSIONS = ("s-1", "s-2", "s-3")


def _intent(world: World, i: int) -> Submit:
    rng = world.streams.workload
    keyed = rng.random() < 0.6
    intent = Intent(
        pattern=rng.choice(("echo", "two_step")),
        prompt=f"prompt-{i}",
        source="sim",
        sigil=rng.choice(("alice", "bob")),
        scopes=("runs:write",),
        content={"n": i},
        session=rng.choice(SESSIONS) if rng.random() < 0.25 else None,
        priority=rng.randint(0, 100) if rng.random() < 0.5 else None,
        idempotency_key=f"key-{i}" if keyed else None,
    )
    return Submit(intent, held=keyed and rng.random() < 0.3)


async def drive(world: World) -> None:
    rng = world.streams.workload
    client = Client(world, world.streams.actors)
    world.actors["client"] = client
    keyed: list[Submit] = []
    for i in range(rng.randint(12, 30)):
        await anyio.sleep(round(rng.expovariate(1 / 6), 3))
        roll = rng.random()
        if keyed and roll < 0.15:
            sub = rng.choice(keyed)  # an exact replay
        elif keyed and roll < 0.25:
            prior = rng.choice(keyed)  # the same key for other work
            changed = prior.intent.model_copy(update={"prompt": prior.intent.prompt + "-other"})
            sub = Submit(changed, held=prior.held)
        else:
            sub = _intent(world, i)
            if sub.intent.idempotency_key is not None:
                keyed.append(sub)
        await client.submit(sub)
        await client.settle_debts(attempts=1)


async def heal(world: World) -> None:
    client = world.actors.get("client")
    if isinstance(client, Client):
        await client.settle_debts()


BASIC = register(Scenario("basic", __doc__ or "", drive, heal))
