"""The simulator's run loop (sim/loop.py).

quiet_io: a zero-timeout poll is skipped only while nothing but the run's wakeup
socket is waited on and nothing came from outside the run; the tasks then step in
exactly the order of the plain loop, and sockets and threads still work.
plain_deadline_updates: cancel scopes with deadlines moved, cancelled, nested and
left by exceptions behave, step for step, as under trio's own context manager.
direct_trio: anyio's checkpoint, sleep and clock helpers are trio's own inside the
block and anyio's again after it; tasks sleeping and checkpointing through anyio
step in the same order either way, and a bad delay is refused as anyio refuses it.
quick_shuffle: the same permutations and generator state as random.Random.shuffle,
and the same schedule; trio's generator is back, in the state reached, after it."""

from __future__ import annotations

import random
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import trio
import trio.testing
from trio._core._run import TheIOManager

from sim.clock import sim_clock
from sim.loop import QuickShuffle, direct_trio, plain_deadline_updates, quick_shuffle, quiet_io

epoll_only = pytest.mark.skipif(TheIOManager.__name__ != "EpollIOManager",
                                reason="quiet_io only acts on epoll")


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every real poll made, by its timeout."""
    made: list[float] = []
    real = TheIOManager.get_events

    def counted(self: Any, timeout: float) -> Any:
        made.append(timeout)
        return real(self, timeout)

    monkeypatch.setattr(TheIOManager, "get_events", counted)
    return made


def _steps(quiet: bool, seed: int) -> list[tuple[int, int, float]]:
    """The order in which 12 tasks take 30 steps each (sleeps, checkpoints, events)."""
    order: list[tuple[int, int, float]] = []
    trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio._core._run._r.seed(seed)

    async def task(i: int, go: trio.Event) -> None:
        rng = random.Random(i)
        for step in range(30):
            r = rng.random()
            if r < 0.4:
                await trio.sleep(rng.choice([0.0, 0.5, 2.0]))
            elif r < 0.8:
                await trio.lowlevel.checkpoint()
            elif i % 3 == 0:
                go.set()
            else:
                await go.wait()
            order.append((i, step, trio.current_time()))

    async def main() -> None:
        if quiet:
            assert quiet_io()
        go = trio.Event()
        async with trio.open_nursery() as nursery:
            for i in range(12):
                nursery.start_soon(task, i, go)

    trio.run(main, clock=sim_clock())
    return order


@epoll_only
def test_tasks_step_in_the_order_of_the_plain_loop_without_polling(polls: list[float]) -> None:
    for seed in range(5):
        plain = _steps(False, seed)
        made = len(polls)
        assert made > 100  # the plain loop polls on every turn
        assert _steps(True, seed) == plain
        assert len(polls) - made < 10  # the quiet loop: only the turns before main() ran


@epoll_only
def test_a_socket_wait_brings_the_poll_back(polls: list[float]) -> None:
    async def main() -> bytes:
        assert quiet_io()
        a, b = trio.socket.socketpair()
        with a, b:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(a.send, b"ping")
                return await b.recv(4)

    assert trio.run(main, clock=sim_clock()) == b"ping"
    assert polls


@epoll_only
@pytest.mark.timeout(30)  # a loop that missed the callback spins instead of failing
def test_work_handed_to_the_run_is_seen_and_polling_resumes(polls: list[float]) -> None:
    """run_sync_soon (what threads and Ctrl-C use) wakes the run's entry task through
    its wakeup socket: after it the quiet loop polls again, so the callback runs
    before the virtual clock jumps to the deadline."""

    async def main() -> float:
        assert quiet_io()
        done = trio.Event()
        await trio.sleep(1)
        quiet = len(polls)
        trio.lowlevel.current_trio_token().run_sync_soon(done.set)
        with trio.fail_after(10):
            await done.wait()
        assert len(polls) > quiet
        return trio.current_time()

    assert trio.run(main, clock=sim_clock()) == 1.0


@epoll_only
def test_a_thread_still_answers(polls: list[float]) -> None:
    async def main() -> int:
        assert quiet_io()
        return await trio.to_thread.run_sync(lambda: 42)

    assert trio.run(main) == 42


def _scoped(seed: int) -> list[tuple[Any, ...]]:
    """What 10 tasks see while they open nested cancel scopes with deadlines, move
    those deadlines, cancel each other's scopes and raise out of them."""
    seen: list[tuple[Any, ...]] = []
    trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio._core._run._r.seed(seed)
    scopes: list[trio.CancelScope] = []

    async def task(i: int) -> None:
        rng = random.Random(seed * 100 + i)
        for step in range(25):
            r = rng.random()
            try:
                with trio.move_on_after(rng.choice([0.0, 0.5, 3.0, 50.0])) as outer:
                    scopes.append(outer)
                    with trio.CancelScope(deadline=trio.current_time() + rng.random() * 4) \
                            as inner:
                        if r < 0.3:
                            inner.deadline += rng.choice([-1.0, 1.0, 5.0])
                        elif r < 0.5 and scopes:
                            rng.choice(scopes).cancel()
                        elif r < 0.6:
                            raise KeyError(i)
                        elif r < 0.7:
                            inner.deadline = float("inf")
                        await trio.sleep(rng.random() * 2)
                    await trio.lowlevel.checkpoint()
                seen.append((i, step, trio.current_time(), outer.cancelled_caught,
                             inner.cancelled_caught))
            except KeyError as exc:
                seen.append((i, step, trio.current_time(), "raised", exc.args))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(task, i)

    trio.run(main, clock=sim_clock())
    return seen


@pytest.mark.timeout(30)  # deadlines lost would leave the virtual clock nowhere to jump
def test_cancel_scopes_behave_as_under_trios_context_manager() -> None:
    original = trio.CancelScope.__dict__["_might_change_registered_deadline"]
    for seed in range(8):
        plain = _scoped(seed)
        with plain_deadline_updates():
            assert trio.CancelScope.__dict__["_might_change_registered_deadline"] \
                is not original
            assert _scoped(seed) == plain
        assert trio.CancelScope.__dict__["_might_change_registered_deadline"] is original
    assert any(s[3] is True for s in plain) and any(s[3] == "raised" for s in plain)


def _anyio_steps(seed: int) -> list[tuple[int, int, float]]:
    """Tasks that sleep and checkpoint through anyio: (task, step, time), in run order."""
    seen: list[tuple[int, int, float]] = []
    trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio._core._run._r.seed(seed)
    rng = random.Random(seed)
    delays = [[rng.choice((0.0, 0.0, 0.25, 1.0, 2.5)) for _ in range(12)] for _ in range(6)]

    async def task(i: int) -> None:
        for step, delay in enumerate(delays[i]):
            if step % 3 == 0:
                await anyio.lowlevel.checkpoint()
            elif step % 3 == 1:
                await anyio.lowlevel.cancel_shielded_checkpoint()
                await anyio.lowlevel.checkpoint_if_cancelled()
            await anyio.sleep(delay)
            seen.append((i, step, anyio.current_time()))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(task, i)

    trio.run(main, clock=sim_clock())
    return seen


def test_direct_trio_swaps_anyio_helpers_and_keeps_the_schedule() -> None:
    originals = (anyio.sleep, anyio.current_time, anyio.lowlevel.checkpoint,
                 anyio.lowlevel.checkpoint_if_cancelled,
                 anyio.lowlevel.cancel_shielded_checkpoint)
    for seed in range(4):
        plain = _anyio_steps(seed)
        with direct_trio():
            assert anyio.lowlevel.checkpoint is trio.lowlevel.checkpoint
            assert anyio.current_time is trio.current_time
            assert _anyio_steps(seed) == plain
        assert (anyio.sleep, anyio.current_time, anyio.lowlevel.checkpoint,
                anyio.lowlevel.checkpoint_if_cancelled,
                anyio.lowlevel.cancel_shielded_checkpoint) == originals


@pytest.mark.parametrize("delay", [-1.0, float("nan")])
def test_direct_trio_sleep_refuses_what_anyio_refuses(delay: float) -> None:
    async def main() -> str:
        try:
            await anyio.sleep(delay)
        except ValueError as exc:
            return str(exc)
        return "slept"

    plain = trio.run(main, clock=sim_clock())
    with direct_trio():
        assert trio.run(main, clock=sim_clock()) == plain == "delay must be a non-negative number"


def test_quick_shuffle_draws_as_random_shuffle() -> None:
    for seed in range(40):
        plain, quick = random.Random(seed), QuickShuffle(seed)
        for n in (0, 1, 2, 3, 5, 8, 13, 64, 200):
            a, b = list(range(n)), list(range(n))
            plain.shuffle(a)
            quick.shuffle(b)
            assert a == b
            assert plain.getstate() == quick.getstate()


def test_quick_shuffle_keeps_the_schedule_and_hands_the_state_back() -> None:
    original = trio._core._run._r
    for seed in range(4):
        plain = _anyio_steps(seed)
        after_plain = original.getstate()
        with quick_shuffle():
            assert isinstance(trio._core._run._r, QuickShuffle)
            assert _anyio_steps(seed) == plain
        assert trio._core._run._r is original
        assert original.getstate() == after_plain
