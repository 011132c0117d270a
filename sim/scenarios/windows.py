"""One-Run scenarios for crash-window tests: submit a single Run of a
pattern, let an approver decide (or an operator cancel), and finish.

Not registered for campaigns; tests build them with `window_scenario()` and
crash the world at exactly one catalogued point with a plan.
"""

from __future__ import annotations

from typing import Any

import anyio

from runtime.models import Intent
from sim.scenarios import Scenario
from sim.scenarios.client import Client, Submit
from sim.scenarios.people import Approver, Operator
from sim.scenarios.waits import heal
from sim.world import World

WINDOW_KEY = "window-1"


def window_intent(pattern: str, content: dict[str, Any] | None = None) -> Intent:
    return Intent(pattern=pattern, prompt="window", source="sim", sigil="alice",
                  content=content or {}, idempotency_key=WINDOW_KEY)


def window_scenario(
    pattern: str,
    content: dict[str, Any] | None = None,
    *,
    cancel_at: float | None = None,
    held: bool = False,
) -> Scenario:
    intent = window_intent(pattern, content)

    async def drive(world: World) -> None:
        client = Client(world, world.streams.actors, retention_fails=0.0)
        world.actors["client"] = client
        approver = Approver(world)
        world.actors["approver"] = approver
        async with anyio.create_task_group() as tg:
            tg.start_soon(approver.run)
            await world.wait_live()
            await client.submit(Submit(intent, held=held))
            await client.settle_debts(attempts=10)
            if cancel_at is not None:
                await anyio.sleep(cancel_at)
                runs = list(world.ledger.run_table)
                if runs:
                    await Operator(world).cancel(runs[0])
            await anyio.sleep(60.0)
            tg.cancel_scope.cancel()

    return Scenario(f"window-{pattern}", "one Run through one crash window", drive, heal)
