"""Shutdown under an unproved worker stop, with fake worker lanes (no database).

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"
(shutdown paragraph): a worker-stop failure or a part still running at the
shutdown deadline raises, and nothing shared is dismantled under it. Here
the lifespan must end "stuck" with one ungrouped ShutdownIncomplete naming
what did not stop (so the profile keeps its pools open, see
tests/contract/test_shutdown_unproven.py for real SAQ on PostgreSQL), the
factories must not close the reference provider, and `vessel serve` must
exit with one line instead of waiting for the live task.

The simulator cannot show this: its memory broker has no SAQ launcher or
process tasks and nothing is closed under a task, and the asyncio
`Task.cancel()` that SAQ's stop hang needs does not exist under trio.
"""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from runtime.adapters.saq import WorkerStopFailed
from runtime.app.cli import EXIT_SHUTDOWN, exit_if_stop_unproven, exit_when_stuck
from runtime.app.factories import _close_unless_stop_unproven
from runtime.app.lifespan import Lifespan, LifespanStatus, ShutdownIncomplete
from runtime.app.profiles import Vessel, memory_vessel
from runtime.errors import stop_unproven
from tests.bounds import HANG_S

pytestmark = pytest.mark.anyio


def vessel_with_lanes(serve: object) -> Vessel:
    vessel = memory_vessel()
    vessel.lanes.serve = serve  # type: ignore[method-assign]  # the fake worker lanes
    return vessel


async def lanes_whose_stop_fails() -> None:
    """Like SaqBroker.serve under Lanes: the stop could not prove a hop ended."""
    async with anyio.create_task_group() as tg:

        async def one_lane() -> None:
            try:
                await anyio.sleep_forever()
            finally:
                raise WorkerStopFailed("runs", ["hop:run:r:0", "saq-worker:runs"], 30.0)

        tg.start_soon(one_lane)


async def test_a_worker_stop_failure_raises_shutdown_incomplete_and_leaves_it_stuck() -> None:
    lifespan = Lifespan(vessel_with_lanes(lanes_whose_stop_fails), strict=False)
    with pytest.raises(ShutdownIncomplete) as caught:
        async with lifespan.serving() as status:
            assert status.phase == "ready"
    assert lifespan.status.phase == "stuck"
    message = str(caught.value)
    assert "workers stop failed" in message and "hop:run:r:0" in message
    assert "relays" not in message  # the relays did stop
    assert lifespan.status.shutdown_error == message
    assert stop_unproven(caught.value.__cause__)


async def test_workers_still_running_at_the_deadline_raise_shutdown_incomplete() -> None:
    release = anyio.Event()

    async def lanes_that_outlive_the_deadline() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await release.wait()

    lifespan = Lifespan(vessel_with_lanes(lanes_that_outlive_the_deadline), strict=False,
                        shutdown_deadline_s=0.05)

    async def release_once_stuck() -> None:
        while lifespan.status.phase != "stuck":
            await anyio.sleep(0.01)
        release.set()  # only now may the lanes end: the deadline has certainly passed

    caught: list[ShutdownIncomplete] = []

    async def serve_and_stop() -> None:
        try:
            async with lifespan.serving():
                pass
        except ShutdownIncomplete as exc:  # ungrouped: raised outside the task group
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(release_once_stuck)
        tg.start_soon(serve_and_stop)
    assert [str(exc) for exc in caught] == [
        "shutdown did not prove every task ended: workers still running 0.05 s after stop; "
        "shared services are left open"]
    assert lifespan.status.phase == "stuck"


async def test_an_unproved_stop_under_a_caller_error_is_raised_with_it_as_context() -> None:
    lifespan = Lifespan(vessel_with_lanes(lanes_whose_stop_fails), strict=False)
    with pytest.raises(BaseExceptionGroup) as caught:
        async with lifespan.serving():
            raise LookupError("the caller's own failure")
    assert stop_unproven(caught.value)  # what the profile checks before closing anything
    [incomplete] = caught.value.exceptions
    assert isinstance(incomplete, ShutdownIncomplete)
    assert isinstance(incomplete.__context__, LookupError)
    assert lifespan.status.phase == "stuck"


async def test_a_proven_stop_ends_stopped() -> None:
    lifespan = Lifespan(memory_vessel(), strict=False)
    async with lifespan.serving():
        pass
    assert lifespan.status.phase == "stopped" and lifespan.status.shutdown_error is None


async def test_the_reference_provider_stays_open_under_an_unproved_stop() -> None:
    closed: list[str] = []

    async def close() -> None:
        closed.append("closed")

    exit_ = _close_unless_stop_unproven(close)
    unproved = WorkerStopFailed("runs", ["hop"], 1.0)
    assert await exit_(type(unproved), unproved, None) is False
    grouped = BaseExceptionGroup("lanes", [ShutdownIncomplete("stuck")])
    assert await exit_(type(grouped), grouped, None) is False
    assert closed == []
    assert await exit_(None, None, None) is False
    assert await exit_(ValueError, ValueError("other"), None) is False
    assert closed == ["closed", "closed"]


def fake_app(status: LifespanStatus | None) -> SimpleNamespace:
    lifespan = None if status is None else SimpleNamespace(status=status)
    return SimpleNamespace(state=SimpleNamespace(vessel=SimpleNamespace(lifespan=lifespan)))


def test_vessel_serve_exits_with_one_line_when_the_stop_is_unproven(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exits: list[int] = []
    status = LifespanStatus(boot_id="b", phase="stuck",
                            shutdown_error="shutdown did not prove every task ended: workers "
                                           "stop failed: 1 task(s) still alive")
    exit_if_stop_unproven(fake_app(status), exit_now=exits.append)
    assert exits == [EXIT_SHUTDOWN] and EXIT_SHUTDOWN != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("vessel: shutdown did not prove every task ended: workers")
    assert "without waiting for the live task" in lines[0]


@pytest.mark.parametrize("phase", ["stopped", "stopping", "ready"])
def test_vessel_serve_returns_normally_after_a_proven_stop(phase: str) -> None:
    exits: list[int] = []
    exit_if_stop_unproven(fake_app(LifespanStatus(boot_id="b", phase=phase)),
                          exit_now=exits.append)
    exit_if_stop_unproven(fake_app(None), exit_now=exits.append)
    assert exits == []


async def test_a_part_that_never_ends_still_makes_the_phase_stuck_before_teardown_returns(
) -> None:
    """The task group must wait for a part that ignores cancellation; the
    verdict is visible meanwhile, which is what `exit_when_stuck` acts on."""
    release = anyio.Event()
    returned = anyio.Event()

    async def lanes_that_never_end() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await release.wait()

    lifespan = Lifespan(vessel_with_lanes(lanes_that_never_end), strict=False,
                        shutdown_deadline_s=0.05)
    caught: list[BaseException] = []

    async def serve_and_stop() -> None:
        try:
            async with lifespan.serving():
                pass
        except ShutdownIncomplete as exc:
            caught.append(exc)
        finally:
            returned.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_and_stop)
        with anyio.fail_after(HANG_S):
            while lifespan.status.phase != "stuck":
                await anyio.sleep(0.01)
        assert not returned.is_set()  # still waiting for the part that never ended
        exits: list[int] = []
        await exit_when_stuck(fake_app(lifespan.status), grace_s=0.0, exit_now=exits.append)
        assert exits == [EXIT_SHUTDOWN]
        release.set()
    assert len(caught) == 1


async def test_exit_when_stuck_waits_while_the_shutdown_is_not_stuck() -> None:
    exits: list[int] = []
    status = LifespanStatus(boot_id="b", phase="stopping")
    with anyio.move_on_after(0.3):
        await exit_when_stuck(fake_app(status), grace_s=0.0, exit_now=exits.append)
    assert exits == []
    status.phase = "stuck"
    await exit_when_stuck(fake_app(status), grace_s=0.0, exit_now=exits.append)
    assert exits == [EXIT_SHUTDOWN]
