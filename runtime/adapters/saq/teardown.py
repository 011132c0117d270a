"""Queue teardown: every configured disconnect is attempted, cancellation waits.

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"
(shutdown paragraph): queue teardown attempts every configured disconnect
and reports the failures together instead of abandoning later pools after
the first error; a cancellation that arrives meanwhile is kept, but only
delivered once the queue being closed has finished closing and the reverse
sweep has attempted every queue.

An anyio shield alone does not give that on asyncio: it holds back anyio's
own cancel scopes, not a plain `asyncio.Task.cancel()`, which still lands
in the middle of a pool's close and, uncaught, ends the sweep there. Each
disconnect therefore runs in its own task that the sweeping task only
waits for; a cancellation of the sweeping task interrupts that wait, is
recorded, and the wait resumes. asyncio only, like SAQ and psycopg.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from runtime.errors import BrokerUnavailable

log = logging.getLogger(__name__)


class Disconnectable(Protocol):
    async def disconnect(self) -> None: ...


@dataclass
class Teardown:
    """What a reverse sweep saw: each queue's failure, and a deferred cancellation."""

    attempted: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    cancelled: asyncio.CancelledError | None = None

    def raise_for_outcome(self, what: str) -> None:
        """Raise the failures as one group, and the kept cancellation after them.

        A cancellation wins (the caller asked to stop); the group of
        failures is its cause, so nothing that went wrong is lost.
        """
        group = BaseExceptionGroup(what, self.errors) if self.errors else None
        if self.cancelled is not None:
            raise self.cancelled from group
        if group is not None:
            raise group


async def disconnect_in_reverse(queues: Mapping[str, Disconnectable]) -> Teardown:
    """Disconnect `queues` in reverse order, attempting every one of them.

    Never raises: failures and a cancellation of the calling task are
    returned in the `Teardown` for `raise_for_outcome`.
    """
    outcome = Teardown()
    for name in reversed(list(queues)):
        outcome.attempted.append(name)
        closing = asyncio.get_running_loop().create_task(
            queues[name].disconnect(), name=f"saq-disconnect:{name}"
        )
        # Invariant: a queue whose close has started finishes closing before
        # the sweep moves on or hands a cancellation back to its caller.
        while not closing.done():
            try:
                await asyncio.wait({closing})
            except asyncio.CancelledError as exc:
                outcome.cancelled = outcome.cancelled or exc
        failure: BaseException | None
        if closing.cancelled():
            failure = BrokerUnavailable(f"disconnecting SAQ queue {name!r} was cancelled")
        else:
            failure = closing.exception()
        if failure is not None:
            log.warning("disconnecting SAQ queue %s failed: %r", name, failure)
            outcome.errors.append(failure)
    return outcome
