"""quiet_io(): trio's run loop stops asking the kernel for I/O nobody waits on.

Every turn of trio's run loop polls epoll, with a timeout of 0 under the
simulator's clock (MockClock at rate 0 and autojump 0 never sleeps: it jumps).
A simulation does no I/O, so the poll always returns nothing, yet it was the
single largest self cost of the swarm mix (a syscall per task step, about 5%,
py-spy). After `quiet_io()` a zero-timeout poll is answered with "nothing
ready" without the syscall, exactly when the poll could not have found
anything that a simulation may depend on:

- no file descriptor is waited on but the run's own wakeup socket (any
  socket, pipe or other fd a task waits on brings the poll back);
- nothing was ever handed to the run from outside its task steps
  (`run_sync_soon`: threads, `trio.from_thread`, trio's Ctrl-C delivery,
  whose wakeup byte is what the poll would find): once anything was, every
  later poll is real, so a stale wakeup is seen as before.
A poll with a real timeout (a clock that sleeps) is always made. So a seed's
task steps, and its trace, are those of the plain loop; the trace-hash
comparison of every scenario before and after is the check, and
tests/unit/test_quiet_io.py drives threads and sockets through a quiet loop.

Private trio API (trio is pinned): the run's I/O manager and entry queue get
subclasses that add no state, in place, for this run only.
"""

from __future__ import annotations

from typing import Any

import trio

_entry_used = [False]
"""Whether the current run's entry queue was ever handed work (one run at a time)."""


def _classes() -> tuple[type, type] | None:
    from trio._core._entry_queue import EntryQueue
    from trio._core._run import TheIOManager  # type: ignore[attr-defined]

    if getattr(TheIOManager, "__name__", "") != "EpollIOManager":
        return None  # kqueue / IOCP: left as they are
    io_base: Any = TheIOManager
    entry_base: Any = EntryQueue

    class QuietEpoll(io_base):  # type: ignore[misc]
        __slots__ = ()

        def get_events(self, timeout: float) -> Any:
            if timeout == 0 and not _entry_used[0] and len(self._registered) <= 1:
                return []  # what epoll gives when nothing is ready
            return super().get_events(timeout)

    class WatchedEntryQueue(entry_base):  # type: ignore[misc]
        __slots__ = ()

        def run_sync_soon(self, *args: Any, **kwargs: Any) -> None:
            _entry_used[0] = True
            super().run_sync_soon(*args, **kwargs)

    return QuietEpoll, WatchedEntryQueue


_CLASSES: list[tuple[type, type] | None] = []


def quiet_io() -> bool:
    """Make the current trio run's zero-timeout I/O polls free (see the module);
    returns whether it could (epoll platforms only). Call from inside the run."""
    if not _CLASSES:
        _CLASSES.append(_classes())
    classes = _CLASSES[0]
    if classes is None:
        return False
    quiet, watched = classes
    runner = trio._core._run.GLOBAL_RUN_CONTEXT.runner
    _entry_used[0] = False
    runner.entry_queue.__class__ = watched
    runner.io_manager.__class__ = quiet
    return True
