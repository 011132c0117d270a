"""Startup answers SIGTERM (issue 15, item 2).

A reconciliation pass that takes long (a large backlog of open work, a
slow database) used to ignore SIGTERM until it finished: uvicorn only
records the signal while the lifespan starts. `Lifespan.interrupt()`
cancels the pass where it stands (reconciliation is built to survive
process death anywhere, seed 000_81a5c720b14d934a.txt, "Cancellation,
mutation, and recovery"), and `vessel serve` turns a signal during startup
into that interrupt and a clean exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from runtime import faults
from runtime.app.factories import memory_lifespan
from runtime.app.http import AppState, create_app, interrupt_startup
from runtime.app.lifespan import Lifespan, StartupInterrupted
from runtime.app.profiles import memory_vessel
from tests.bounds import HANG_S

ROOT = Path(__file__).resolve().parents[2]


class BlockedReconcile:
    """Fault points whose RECONCILE_STARTED never returns (a pass that takes long)."""

    def __init__(self) -> None:
        self.entered = anyio.Event()

    async def point(self, name: str, **context: Any) -> None:
        if name == faults.RECONCILE_STARTED:
            self.entered.set()
            await anyio.sleep_forever()


@pytest.mark.anyio
async def test_interrupt_cancels_a_running_reconciliation_and_serves_nothing() -> None:
    blocked = BlockedReconcile()
    vessel = memory_vessel(faults=blocked)
    served = []
    vessel.lanes.serve = lambda: served.append(True)  # type: ignore[assignment,method-assign,return-value]
    lifespan = Lifespan(vessel, strict=True)

    async def interrupt_when_blocked() -> None:
        await blocked.entered.wait()
        lifespan.interrupt()

    with anyio.fail_after(HANG_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(interrupt_when_blocked)
            with pytest.raises(StartupInterrupted):
                async with lifespan.serving():
                    pytest.fail("served after an interrupt")
    assert lifespan.status.phase == "interrupted"
    assert served == []  # no worker lane was started


@pytest.mark.anyio
async def test_interrupt_after_startup_is_left_to_the_server_shutdown() -> None:
    lifespan = Lifespan(memory_vessel(), strict=False, relay_every_s=3600)
    async with lifespan.serving() as status:
        lifespan.interrupt()
        await anyio.sleep(0.01)
        assert status.phase == "ready"
    assert lifespan.status.phase == "stopped"


@pytest.mark.anyio
async def test_a_stop_requested_before_the_lifespan_exists_refuses_startup() -> None:
    app = create_app(memory_lifespan(), insecure_local=True)
    interrupt_startup(app)
    state = app.state.vessel
    assert isinstance(state, AppState) and state.stop_requested
    with pytest.raises(StartupInterrupted):
        async with app.router.lifespan_context(app):
            pytest.fail("served after a stop request")


SERVER = textwrap.dedent("""
    import sys
    import anyio
    import typer
    from runtime import faults
    from runtime.app.auth import Credentials
    from runtime.app.cli import run_server
    from runtime.app.factories import memory_lifespan
    from runtime.app.http import create_app

    class Blocked:
        async def point(self, name, **context):
            if name == faults.RECONCILE_STARTED:
                print("RECONCILING", flush=True)
                await anyio.sleep_forever()

    app = create_app(memory_lifespan(faults=Blocked()), Credentials({}, insecure_local=True))
    try:
        run_server(app, host="127.0.0.1", port=0, log_level="warning")
    except typer.Exit as exc:  # as the typer command would end
        sys.exit(exc.exit_code)
""")


def test_vessel_serve_exits_on_sigterm_during_startup() -> None:
    """The whole chain, in a real process: uvicorn's signal capture, the
    watcher's interrupt, the cancelled pass, a one-line exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "RECONCILING", (line, proc.stderr.read() if proc.stderr else "")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=2 * HANG_S)  # it exits, where it used to wait forever
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read() if proc.stderr else ""
    assert code == 0, stderr[-2000:]
    assert "stopped by a signal during startup" in stderr
    assert "Traceback" not in stderr.split("stopped by a signal")[-1]
