"""A real Vessel server process whose one hop never stops (for test_unproved_stop).

`python -m tests.restart.stuck_vessel DSN PORT TOKEN` serves the PostgreSQL
profile exactly as `vessel serve` does (`runtime.app.cli.run_server`), with
two test-only differences: the registry also holds Pattern `stubborn`, whose
node ignores every cancellation for ever (as a task that lost its
cancellation in SAQ's stop does, NOTES-dependencies.md), and SAQ's stop
deadline is 2 s instead of 30 s so the unproved stop is reached quickly.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import typer

from runtime.adapters.saq import SaqSettings
from runtime.app.cli import run_server
from runtime.app.http import create_app
from runtime.app.lifespan import Lifespan
from runtime.app.profiles import postgres_vessel
from runtime.hop import HopContext
from runtime.patterns import default_registry
from runtime.registry import Node, Pattern

STOP_DEADLINE_S = 2.0
STARTED_LINE = "stubborn hop started"


async def _stubborn(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
    print(STARTED_LINE, file=sys.stderr, flush=True)
    while True:
        with contextlib.suppress(BaseException):  # loses every cancellation, on purpose
            await anyio.sleep(0.05)


def main(dsn: str, port: int, token: str) -> None:
    registry = default_registry()
    registry.register(Pattern(name="stubborn", version=1, nodes=(Node("stubborn", _stubborn),)))
    settings = SaqSettings(stop_deadline_s=STOP_DEADLINE_S, cancel_deadline_s=0.5)

    @asynccontextmanager
    async def factory() -> AsyncIterator[Lifespan]:
        async with postgres_vessel(dsn, migrate=True, registry=registry,
                                   saq_settings=settings) as vessel:
            yield Lifespan(vessel, strict=True, relay_every_s=0.5)

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    app = create_app(factory, {"operator": token}, profile="postgres")
    try:
        run_server(app, host="127.0.0.1", port=port)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
