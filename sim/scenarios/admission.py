"""Scenario `admission_race`: several clients submit the same scoped idempotency
key at the same virtual instant, with identical content and with one fingerprint
field changed, some holding the admission for their retention hook, and later
replay HELD admissions with and without a hook, under crashes and faults. Every
key admits a `chatty` Run, whose hop holds its claim for about 2 s (CHATTY_TOKENS),
so a second creator of a HELD admission often releases it while the hop is
claimed: the admission then only observes the later state. Two
Vessels serve the one database; half the bursts go through both at once, so no
process lock serialises them and a replay can find the other's admission HELD.

Seed 000_81a5c720b14d934a.txt ("Admission and exact claim") decides every race:
one key admits one Run; an identical replay (its content's keys in any order)
gets that Run back, a replay with any fingerprint field changed is refused, and
a HELD admission is handed out only by a replay that brings its retention hook.
`idempotent_admission` holds the outcomes to that, in the trace and in the ledger
(one Run per scoped key).
"""

from __future__ import annotations

import anyio

from runtime.models import Intent
from sim.scenarios import Scenario, register
from sim.scenarios.client import Client, Submit
from sim.scenarios.session_race import two_vessels
from sim.scenarios.workload import CHANGED_FIELDS, _changed, _reordered, settle_client
from sim.world import World


def _variant(world: World, base: Submit) -> Submit:
    """One racing submission of `base`'s key: the same content (with or without a
    hook) or one fingerprint field changed."""
    rng = world.streams.workload
    roll = rng.random()
    if roll < 0.5:  # the same content, rebuilt by the client in another key order
        return Submit(_reordered(base.intent), held=base.held)
    if roll < 0.7:
        return Submit(base.intent, held=not base.held)  # a hold replayed without, or with
    field = rng.choice(CHANGED_FIELDS)
    changed = base.intent.model_copy(update={field: _changed(base.intent, field)})
    return Submit(changed, held=base.held)


CHATTY_TOKENS = 40
"""A chatty key's hop streams this many tokens 0.05 s apart: its delivery stays
CLAIMED for about 2 s, as long as two retention hooks can differ (0-2 s): when
two submissions of the same content at the same instant both find their own
records (engine.own_commit) and both hold the admission, the later hook releases
it while the earlier one's hop holds the claim; that admission must only observe
the CLAIMED delivery, never hand it to the broker again (publish_open_hop)."""


async def _burst(client: Client, subs: list[Submit]) -> None:
    """Every submission of the burst at the same virtual instant."""
    async with anyio.create_task_group() as tg:
        for sub in subs:
            tg.start_soon(client.submit, sub)


async def drive(world: World) -> None:
    rng = world.streams.workload
    client = Client(world, world.streams.actors)
    world.actors["client"] = client
    bases: list[Submit] = []
    for i in range(rng.randint(6, 12)):
        await anyio.sleep(round(rng.expovariate(1 / 8), 3))
        if bases and rng.random() < 0.3:
            base = rng.choice(bases)  # a later race on a key already admitted (maybe HELD)
        else:
            intent = Intent(pattern="chatty", prompt=f"race-{i}", source="sim",
                            sigil=rng.choice(("alice", "bob")), scopes=("runs:write",),
                            content={"n": i, "burst": f"race-{i}", "tokens": CHATTY_TOKENS},
                            priority=rng.randint(0, 100) if rng.random() < 0.5 else None,
                            idempotency_key=f"race-{i}")
            base = Submit(intent, held=rng.random() < 0.4)
            bases.append(base)
        subs = [base, *(_variant(world, base) for _ in range(rng.randint(1, 3)))]
        if rng.random() < 0.5:  # through both Vessels: no process lock serialises them
            subs = [Submit(s.intent, s.held, via=j) for j, s in enumerate(subs)]
        await _burst(client, subs)
        await client.settle_debts(attempts=1)


ADMISSION_RACE = register(Scenario("admission_race", __doc__ or "", drive, settle_client,
                                   setup=two_vessels))
