"""Which faults struck one call: a record scoped to the call's task context.

The trace says that a fault fired somewhere in the world; an operator's call
needs to know whether one fired on its own path (its ledger writes, its abort,
its agent job or service attempt cancels). `watching()` opens a record in the
current context; every task the call spawns inherits it (trio copies the
context at spawn), so the injector notes each fault it fires on that path and
only there. Nothing is emitted: traces are the same with or without a watch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_STRUCK: ContextVar[list[str] | None] = ContextVar("struck", default=None)


@contextmanager
def watching() -> Iterator[list[str]]:
    """Record, as `point:kind`, every fault fired in this context until exit."""
    struck: list[str] = []
    token = _STRUCK.set(struck)
    try:
        yield struck
    finally:
        _STRUCK.reset(token)


def note(point: str, kind: str) -> None:
    """Called by the injector for each fault it fires: kept if a call watches."""
    struck = _STRUCK.get()
    if struck is not None:
        struck.append(f"{point}:{kind}")
