"""The transaction gate of the memory adapters.

Every memory-adapter operation first yields to the scheduler and then calls
the gate hook of the calling task (a context variable, None in production),
with no await between the gate and its writes. The simulator installs a
hook that raises ProcessCrashed for a dead process incarnation, so a task
of a crashed boot can never write, not even from a shielded scope.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

import anyio.lowlevel

BEFORE_APPLY: ContextVar[Callable[[], None] | None] = ContextVar("before_apply", default=None)


async def enter() -> None:
    await anyio.lowlevel.checkpoint()
    hook = BEFORE_APPLY.get()
    if hook is not None:
        hook()
