"""Scenario `session_race`: two Vessels serve one database, and clients send
bursts of admissions through both at the same moment: different keys into one
Bridge session, one key with the same content, or one key with other content;
sometimes a client then replays an Intent admitted earlier in the same session
while the burst's Run is still open (an exact replay returns its Run, never
SessionBusy); sometimes an operator then cancels an admitted Run through both at
once.

Each Vessel serialises same-key admissions and fences a session only inside
its own process (runtime.sessions), so across Vessels only the ledger's
admission transaction keeps a session to one open Run and a key to one Run
(issue 15, M11 item 1; seed 000_81a5c720b14d934a.txt, "Admission and exact
claim"; "Cancellation, mutation, and recovery" for the cancel that both
Vessels elect themselves to write). The checker's session_fence,
idempotent_admission and cancellation invariants watch every burst; crashes
and outages go on as in any swarm.
"""

from __future__ import annotations

from uuid import UUID

import anyio

from runtime.errors import LedgerUnavailable, RuntimeEngineError, SessionBusy
from runtime.models import Intent
from runtime.recovery.boot_lease import BOOT_LEASE_S
from sim.delivery_checks import content_digest
from sim.scenarios import Scenario, register
from sim.scenarios.workload import settle_client
from sim.world import Boot, Unavailable, World

SESSIONS = ("race-1", "race-2")
CANCEL_SHARE = 0.4
"""Share of bursts after which every serving Vessel cancels the burst's Run at once."""
REPLAY_SHARE = 0.5
"""Share of bursts after which an Intent admitted earlier in the burst's session is
replayed exactly, while the burst's own Run is likely still open."""


def two_vessels(world: World) -> None:
    """Two leased Vessels serve the one database (also used by admission_race)."""
    world.boot_lease_s = BOOT_LEASE_S
    world.vessels = 2


def _serving(world: World) -> list[Boot]:
    return [b for b in world.boots
            if b.alive and b.ready and not b.frozen and not b.stopping.is_set()]


async def _submit(world: World, boot: Boot, intent: Intent, admitted: list[UUID],
                  won: list[Intent] | None = None) -> None:
    run_id = None
    checks = world.checker.admission_checks
    prior = checks.admitted_before(intent)
    try:
        result = await boot.call(lambda b: b.engine.submit(intent))
        outcome, run_id = "admitted", str(result.run.id)
        admitted.append(result.run.id)
        if won is not None:
            won.append(intent)
    except (Unavailable, LedgerUnavailable, RuntimeEngineError) as exc:
        outcome = type(exc).__name__
        if isinstance(exc, SessionBusy):
            checks.session_busy(exc, intent, prior)
    world.trace.emit(
        "client", "submit.result", key=intent.idempotency_key, outcome=outcome,
        run_id=run_id, fingerprint=intent.fingerprint(), held=False,
        content=content_digest(intent), boot=boot.id,
    )


async def _cancel(world: World, boot: Boot, run_id: UUID) -> None:
    try:
        run = await boot.call(lambda b: b.canceller.cancel(run_id))
        outcome = run.status.value
    except (Unavailable, LedgerUnavailable, RuntimeEngineError) as exc:
        outcome = type(exc).__name__
    world.trace.emit("operator", "cancel", run=str(run_id), outcome=outcome, boot=boot.id)


def _burst(world: World, i: int) -> list[Intent]:
    rng = world.streams.workload
    session, shape = rng.choice(SESSIONS), rng.random()
    out = []
    for j in range(rng.randint(2, 4)):
        if shape < 0.5:  # different keys, one session
            key, prompt = f"race-{i}-{j}", f"p-{i}-{j}"
        elif shape < 0.75:  # one key, the same content: one Run, replays
            key, prompt = f"race-{i}", f"p-{i}"
        else:  # one key, other content: one Run, conflicts
            key, prompt = f"race-{i}", f"p-{i}-{j}"
        out.append(Intent(pattern="echo", prompt=prompt, source="sim", sigil="alice",
                          scopes=("runs:write",), session=session, idempotency_key=key))
    return out


async def _workload(world: World) -> None:
    rng = world.streams.workload
    earlier: dict[str | None, list[Intent]] = {}
    for i in range(rng.randint(8, 16)):
        await anyio.sleep(round(rng.expovariate(1 / 8), 3))
        boots = _serving(world)
        if not boots:
            continue
        admitted: list[UUID] = []
        won: list[Intent] = []
        intents = _burst(world, i)
        async with anyio.create_task_group() as tg:
            for j, intent in enumerate(intents):
                tg.start_soon(_submit, world, boots[j % len(boots)], intent, admitted, won)
        session = intents[0].session
        boots = _serving(world)
        if earlier.get(session) and boots and rng.random() < REPLAY_SHARE:
            await _submit(world, boots[0], rng.choice(earlier[session]), [])
        earlier.setdefault(session, []).extend(won[:1])
        boots = _serving(world)
        if admitted and boots and rng.random() < CANCEL_SHARE:
            target = admitted[0]
            async with anyio.create_task_group() as tg:
                for boot in boots:
                    tg.start_soon(_cancel, world, boot, target)


SESSION_RACE = register(Scenario(
    "session_race", " ".join((__doc__ or "").split(":", 1)[1].split("\n\n")[0].split()),
    _workload, settle_client, setup=two_vessels))
