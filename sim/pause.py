"""Pause here, act, resume: a fault kind that is not a crash (issue 18, item 2).

At a pause point a hop of a live boot stops where it stands, an external
actor fires one action at that very Run, and the hop goes on once the action
returned (or after the planned `amount` seconds, whichever comes first, so an
action that waits for the paused hop cannot deadlock the world). The points
are the moments between the durable steps of a hop that operators and relays
race with: between the broker's dequeue and the claim (`broker.deliver`),
between the claim and the settlement (the claim, the applied effect, the
hardware wait) and between a stasis checkpoint and the park (the consent,
delegate and service windows of runtime.faults). The actions:

- `cancel`: an operator cancels the Run (seed 000, "Cancellation, mutation,
  and recovery");
- `verdict`: the consent owner decides the Run's pending consent, if it has one
  (seed 003, "Return makes a new claim");
- `replay`: the client sends the Run's keyed admission again (seed 000,
  "Admission and exact claim");
- `relay`: a relay pass of the live boot (a fresh page schedule, as another
  Vessel's relay would run it) visits every open Run.

The action and the wait come from the fault plan (PlannedFault.action and
amount), so a recorded pause replays and shrinks like every other fault.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING
from uuid import UUID

import anyio

from runtime import faults
from runtime.errors import LedgerUnavailable, RuntimeEngineError
from runtime.models import ConsentStatus
from runtime.stasis.consent import decide

if TYPE_CHECKING:
    from sim.faults.plan import PlannedFault
    from sim.world import Boot, World

DEQUEUED = "broker.deliver"
"""The simulator's own point between a worker's dequeue and its claim."""

PAUSE_POINTS = frozenset({
    DEQUEUED,
    faults.CLAIM_COMMITTED,
    faults.EFFECT_APPLIED,
    faults.HARDWARE_AWAITING,
    faults.CONSENT_CHECKPOINT_SAVED,
    faults.CONSENT_ROW_SAVED,
    faults.DELEGATE_CHECKPOINT_SAVED,
    faults.DELEGATE_SUBMITTED,
    faults.SERVICE_CHECKPOINT_SAVED,
})


class Action(enum.StrEnum):
    CANCEL = "cancel"
    VERDICT = "verdict"
    REPLAY = "replay"
    RELAY = "relay"


ACTIONS = tuple(Action)


async def pause(boot: Boot, point: str, run_id: UUID, pf: PlannedFault) -> None:
    """Hold the calling hop at `point` while the planned action runs."""
    world = boot.world
    action = Action(pf.action or Action.RELAY)
    world.trace.emit("pause", "pause.begin", point=point, run=str(run_id), action=action,
                     amount=pf.amount)
    done = anyio.Event()

    async def act() -> None:
        try:
            outcome = await _act(world, action, run_id)
        finally:
            done.set()
        world.trace.emit("pause", "pause.acted", run=str(run_id), action=action,
                         outcome=outcome)

    world.spawn(act)
    with anyio.move_on_after(pf.amount):
        await done.wait()
    boot.check_alive()
    world.trace.emit("pause", "pause.end", point=point, run=str(run_id))


async def _act(world: World, action: Action, run_id: UUID) -> str:
    from sim.world import Unavailable

    try:
        if action is Action.CANCEL:
            run = await world.request(lambda boot: boot.canceller.cancel(run_id))
            return run.status.value
        if action is Action.VERDICT:
            return await _verdict(world, run_id)
        if action is Action.REPLAY:
            return await _replay(world, run_id)
        return await _relay_pass(world)
    except (Unavailable, LedgerUnavailable, RuntimeEngineError) as exc:
        return type(exc).__name__


async def _verdict(world: World, run_id: UUID) -> str:
    pending = sorted((c for c in world.ledger.consent_table.values()
                      if c.run_id == run_id and c.status is ConsentStatus.PENDING),
                     key=lambda c: (c.created_at, c.id))
    if not pending:
        return "no pending consent"
    consent = pending[-1]
    approve = world.streams.actors.random() < 0.75
    await world.request(lambda boot: decide(boot.engine, consent.id, approve, consent.owner))
    return "approved" if approve else "denied"


async def _replay(world: World, run_id: UUID) -> str:
    from sim.scenarios.client import Client

    client = world.actors.get("client")
    if not isinstance(client, Client) or run_id not in client.admitted:
        return "no keyed admission"
    return await client.submit(client.admitted[run_id])


async def _relay_pass(world: World) -> str:
    boot = world.live_boot
    relays = boot.lifespan.relays if boot is not None else None
    if boot is None or relays is None:
        return "no live relay"
    fresh = dataclasses.replace(relays, pages={}, errors=0)
    await boot.call(lambda _: fresh.pass_once())
    return f"relay pass ({fresh.errors} errors)"
