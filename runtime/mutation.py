"""Runtime mutation: quiesce claiming around a change (seed 000, "Cancellation,
mutation, and recovery").

`pause_queues()` is only the global pre-claim gate: the broker may still hand
a hop to a worker, which then waits before its ledger claim. A mutation
closes the gate, waits (bounded) for the hops already past it (claiming or
claimed) to finish, applies the change, and reopens the gate whatever happened: no
effect, success, failure or timeout. Queue depth and worker count prove
nothing about quiescence; only the hops in flight do.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from runtime.worker import Worker

log = logging.getLogger(__name__)

DRAIN_TIMEOUT_S = 30.0
DRAIN_POLL_S = 0.1


class DrainTimeout(Exception):
    """Hops still held their claims when the drain deadline passed."""


def broadcast_soft_stop() -> None:
    """Version one asks nothing of running hops (deliberately a no-op)."""
    return None


@asynccontextmanager
async def pause_queues(
    worker: Worker, drain_timeout_s: float = DRAIN_TIMEOUT_S
) -> AsyncIterator[None]:
    """Close the pre-claim gate, drain the hops in flight, yield, then reopen the gate."""
    worker.gate.close()
    try:
        with anyio.move_on_after(drain_timeout_s) as scope:
            while worker.in_flight:
                await anyio.sleep(DRAIN_POLL_S)
        if scope.cancelled_caught:
            raise DrainTimeout(
                f"{worker.in_flight} hops still in flight after {drain_timeout_s}s"
            )
        yield
    finally:
        worker.gate.open()
