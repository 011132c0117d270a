"""Relay supervision: a relay that exits before shutdown is restarted with a
deterministic exponential backoff capped at five seconds (seed 000)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

log = logging.getLogger(__name__)

BACKOFF_BASE_S = 0.1
BACKOFF_CAP_S = 5.0


def backoff(failures: int) -> float:
    """0.1, 0.2, 0.4, ... seconds, never more than the cap."""
    return float(min(BACKOFF_CAP_S, BACKOFF_BASE_S * float(2 ** max(0, failures - 1))))


async def supervise(
    name: str,
    relay: Callable[[], Awaitable[None]],
    on_restart: Callable[[str, int], None] | None = None,
) -> None:
    """Run `relay` forever; cancellation (shutdown) is the only way out."""
    failures = 0
    while True:
        try:
            await relay()
            log.warning("relay %s exited; restarting", name)
        except Exception as exc:
            log.warning("relay %s failed: %r; restarting", name, exc)
        failures += 1
        if on_restart is not None:
            on_restart(name, failures)
        await anyio.sleep(backoff(failures))
