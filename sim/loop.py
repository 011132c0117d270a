"""The simulator's run loop: trio's, with two costs of every task step removed.

`quiet_io()`: trio's run loop stops asking the kernel for I/O nobody waits on.

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

`plain_deadline_updates()`: every cancel scope entered, closed or cancelled
re-registers its deadline inside `with self._might_change_registered_deadline():`,
a generator-based context manager, so contextlib's machinery (building the
generator and its wrapper, stepping it twice) ran three times per scope: about
6% of the swarm mix (py-spy). While it is in force the method returns a small
class with the same `__exit__` body instead; the bookkeeping, and so the
schedule and the trace, is the same, which the trace-hash comparison checks.
It also makes no exception of its own, and one raised inside the block
propagates unchanged (only its traceback lacks contextlib's frames).

`direct_trio()`: anyio's checkpoint and sleep helpers, called by the runtime on
every ledger, broker and wait step, look up the running backend (sniffio, a
dict) and then await the trio backend's classmethod, which awaits trio's own
function: two coroutine frames more per await, and every later resumption of
the task passes through them. While it is in force `anyio.sleep`,
`anyio.current_time` and `anyio.lowlevel.checkpoint`,
`checkpoint_if_cancelled` and `cancel_shielded_checkpoint` are trio's
functions themselves (sleep keeps anyio's argument check), which is exactly
what the trio backend ends up calling, so the schedule and the trace are the
same. Only `run_simulation` enters it, around a trio run it owns; the runtime's
code still calls anyio, and its attributes are restored on the way out.

`quick_shuffle()`: under deterministic scheduling trio shuffles every batch of
runnable tasks with its module's `random.Random`, whose `shuffle` calls the
`_randbelow` method once per element (about 5% of the swarm mix, py-spy, most
of it for batches of one task, which draw nothing). While it is in force that
generator is a `QuickShuffle` holding the same state, whose `shuffle` makes the
very same `getrandbits` calls inline and returns at once for fewer than two
tasks: the same permutation from the same stream, so the same schedule
(tests/unit/test_sim_loop.py compares it with `random.Random.shuffle`); the
state goes back into trio's own generator on the way out.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from math import inf
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


class _DeadlineUpdate:
    """trio's `CancelScope._might_change_registered_deadline`, as a class (trio 0.35)."""

    __slots__ = ("scope",)

    def __init__(self, scope: Any) -> None:
        self.scope = scope

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        scope = self.scope
        old = scope._registered_deadline
        new = inf if scope._cancel_status is None or scope._cancel_called else scope._deadline
        if old != new:
            scope._registered_deadline = new
            runner = trio._core._run.GLOBAL_RUN_CONTEXT.runner
            if runner.is_guest:
                old_next = runner.deadlines.next_deadline()
            if old != inf:
                runner.deadlines.remove(old, scope)
            if new != inf:
                runner.deadlines.add(new, scope)
            if runner.is_guest and old_next != runner.deadlines.next_deadline():
                runner.force_guest_tick_asap()


def _deadline_update(scope: Any) -> _DeadlineUpdate:
    return _DeadlineUpdate(scope)


@contextlib.contextmanager
def plain_deadline_updates() -> Iterator[None]:
    """Within this block, trio's cancel scopes update their registered deadline
    through `_DeadlineUpdate` (see the module); restored on the way out."""
    cls: Any = trio.CancelScope
    original = cls.__dict__["_might_change_registered_deadline"]
    cls._might_change_registered_deadline = _deadline_update
    try:
        yield
    finally:
        cls._might_change_registered_deadline = original


async def _direct_sleep(delay: float) -> None:
    """`anyio.sleep` on trio without the backend lookup: the same check, then trio."""
    if not delay >= 0:
        raise ValueError("delay must be a non-negative number")
    await trio.sleep(delay)


@contextlib.contextmanager
def direct_trio() -> Iterator[None]:
    """Within this block anyio's checkpoint, sleep and clock helpers are trio's own
    (see the module); restored on the way out. For a trio run only."""
    import anyio
    import anyio.lowlevel

    swaps: list[tuple[Any, str, Any]] = [
        (anyio, "sleep", _direct_sleep),
        (anyio, "current_time", trio.current_time),
        (anyio.lowlevel, "checkpoint", trio.lowlevel.checkpoint),
        (anyio.lowlevel, "checkpoint_if_cancelled", trio.lowlevel.checkpoint_if_cancelled),
        (anyio.lowlevel, "cancel_shielded_checkpoint", trio.lowlevel.cancel_shielded_checkpoint),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    for module, name, direct in swaps:
        setattr(module, name, direct)
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


class QuickShuffle(random.Random):
    """`random.Random` whose `shuffle` is the standard one (Python 3.11's Fisher-Yates
    over `_randbelow_with_getrandbits`) written inline: the same `getrandbits`
    calls in the same order, so the same permutation and the same state after it."""

    def shuffle(self, x: Any) -> None:
        n = len(x)
        if n < 2:
            return
        getrandbits = self.getrandbits
        for i in range(n - 1, 0, -1):
            bound = i + 1
            k = bound.bit_length()
            j = getrandbits(k)
            while j >= bound:
                j = getrandbits(k)
            x[i], x[j] = x[j], x[i]


@contextlib.contextmanager
def quick_shuffle() -> Iterator[None]:
    """Within this block trio's scheduler draws from a `QuickShuffle` in the state
    of its own generator (see the module); the state is handed back on the way out."""
    run_mod: Any = trio._core._run
    original = run_mod._r
    quick = QuickShuffle()
    quick.setstate(original.getstate())
    run_mod._r = quick
    try:
        yield
    finally:
        original.setstate(quick.getstate())
        run_mod._r = original
