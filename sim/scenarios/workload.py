"""The shared client workload: a stream of Intents, with exact replays and
conflicting reuse of idempotency keys, submitted over the process boundary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from runtime.models import Intent
from sim.scenarios.client import Client, Submit
from sim.world import World

if TYPE_CHECKING:
    from sim.faults.options import FaultOptions

SESSIONS = ("s-1", "s-2", "s-3")

ContentFn = Callable[[World, str], dict[str, Any]]

CHANGED_FIELDS = ("prompt", "priority", "scopes", "content", "session")
"""The fingerprint fields a conflicting reuse of a key changes, one at a time
(seed 000 'Admission and exact claim': any of them makes the replay a conflict)."""


def _changed(intent: Intent, field: str) -> Any:
    """Another value for one fingerprint field of `intent`."""
    if field == "prompt":
        return intent.prompt + "-other"
    if field == "priority":
        return 7 if intent.priority is None else (intent.priority + 1) % 101
    if field == "scopes":
        return (*intent.scopes, "runs:read")
    if field == "content":
        return {**intent.content, "variant": "other"}
    return "s-other" if intent.session is None else None


def _no_content(world: World, pattern: str) -> dict[str, Any]:
    return {}


def _reordered(intent: Intent) -> Intent:
    """The same Intent with its content's keys in reverse order: a client that rebuilds
    its JSON object for a retry sends the same content, so the replay is exact (the
    fingerprint must not depend on key order)."""
    content = dict(reversed(list(intent.content.items())))
    return intent.model_copy(update={"content": content})


def _intent(world: World, i: int, patterns: tuple[str, ...], content: ContentFn) -> Submit:
    rng = world.streams.workload
    keyed = rng.random() < 0.6
    pattern = rng.choice(patterns)
    intent = Intent(
        pattern=pattern,
        prompt=f"prompt-{i}",
        source="sim",
        sigil=rng.choice(("alice", "bob")),
        scopes=("runs:write",),
        content=content(world, pattern) or {"n": i},
        session=rng.choice(SESSIONS) if rng.random() < 0.25 else None,
        priority=rng.randint(0, 100) if rng.random() < 0.5 else None,
        idempotency_key=f"key-{i}" if keyed else None,
    )
    return Submit(intent, held=keyed and rng.random() < 0.3)


async def submit_stream(
    world: World,
    patterns: tuple[str, ...],
    content: ContentFn = _no_content,
    count: tuple[int, int] = (12, 30),
) -> None:
    rng = world.streams.workload
    client = Client(world, world.streams.actors)
    world.actors["client"] = client
    keyed: list[Submit] = []
    for i in range(rng.randint(*count)):
        await anyio.sleep(round(rng.expovariate(1 / 6), 3))
        roll = rng.random()
        if keyed and roll < 0.15:
            prior = rng.choice(keyed)  # an exact replay, its content's keys reordered
            sub = replace(prior, intent=_reordered(prior.intent))
        elif keyed and roll < 0.25:
            prior = rng.choice(keyed)  # the same key for other work
            field = rng.choice(CHANGED_FIELDS)
            changed = prior.intent.model_copy(update={field: _changed(prior.intent, field)})
            sub = Submit(changed, held=prior.held)
        else:
            sub = _intent(world, i, patterns, content)
            if sub.intent.idempotency_key is not None:
                keyed.append(sub)
        await client.submit(sub)
        await client.settle_debts(attempts=1)


async def settle_client(world: World) -> None:
    client = world.actors.get("client")
    if isinstance(client, Client):
        await client.settle_debts()


def stalled_appends(share: float, max_stall_s: float) -> Callable[[FaultOptions], FaultOptions]:
    """A scenario's fault tuning: at least `share` of Step appends stall, each for up to
    `max_stall_s` (the Step-writer scenarios: step_burst, publish_bound)."""

    def tune(options: FaultOptions) -> FaultOptions:
        return options.model_copy(update={
            "step_stall_per_append": max(options.step_stall_per_append, share),
            "max_stall_s": max_stall_s})

    return tune
