"""A real server whose hop never stops: SIGTERM ends it with one clear line.

Seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and recovery"
(shutdown paragraph): a worker-stop failure raises and leaves the shared
dependencies live. What the operator sees is the point here:

1. boot 1 (`tests.restart.stuck_vessel`: `vessel serve`'s own server code,
   plus a Pattern whose node ignores every cancellation and a 2 s SAQ stop
   deadline) admits a `stubborn` Run over HTTP and its hop starts;
2. SIGTERM: the stop cannot prove the hop ended, the ledger and queue pools
   are left open ("left open" in the log), and the process writes one
   `vessel:` line naming the live hop and exits with status 1 at once.
   Today's main closes the ledger and store pools under the hop and then
   dies by uvicorn's re-raised SIGTERM with nothing but "Application
   shutdown failed";
3. the Run is still RUNNING (nothing was settled under a closed pool), and
   boot 2, a plain `vessel serve`, reconciles it as lost like any process
   death.

The simulator cannot model this: it runs on trio with the memory broker,
which has neither SAQ's launcher and process tasks nor asyncio cancellation.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.receipts.process import AUTH, TOKEN, VesselProcess
from tests.restart.probes import row, wait_for
from tests.restart.stuck_vessel import STARTED_LINE

pytestmark = pytest.mark.restart

REPO = Path(__file__).resolve().parents[2]


class StuckVessel(VesselProcess):
    """Boot 1: the stuck-hop server instead of `vessel serve`."""

    def start(self) -> StuckVessel:
        env = {k: v for k, v in os.environ.items() if not k.startswith("VESSEL_")}
        argv = [sys.executable, "-m", "tests.restart.stuck_vessel", self.dsn,
                str(self.port), TOKEN]
        self.started_at = time.time()
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=REPO)
        return self


def test_an_unproved_worker_stop_exits_with_one_line_and_leaves_the_run_to_recovery(
    pg_fresh_dsn: str, tmp_path: Path, processes: list[VesselProcess]
) -> None:
    with httpx.Client(timeout=10) as client:
        boot1 = StuckVessel(pg_fresh_dsn, tmp_path, "boot1")
        processes.append(boot1.start())
        boot1.wait_ready(client)
        admitted = client.post(f"{boot1.url}/runs", headers=AUTH,
                               json={"pattern": "stubborn", "prompt": "never stops"})
        assert admitted.status_code == 201, admitted.text
        run_id = admitted.json()["id"]
        wait_for(lambda: STARTED_LINE in boot1.output(), "the stubborn hop started")

        boot1.proc.terminate()  # type: ignore[union-attr]
        # Bounded: SAQ's 2 s stop deadline plus uvicorn's 5 s graceful window
        # and slack for a loaded machine. Today's main never exits here.
        code = boot1.wait_death(within=90.0)
        output = boot1.output()
        assert code == 1, (code, output[-4000:])
        lines = [line for line in output.splitlines() if line.startswith("vessel: ")]
        assert len(lines) == 1, output[-4000:]
        assert "shutdown did not prove every task ended: workers stop failed" in lines[0]
        assert f"hop:run:{run_id}:0" in lines[0]
        assert "without waiting for the live task" in lines[0]
        assert "left open" in output
        assert "Traceback" not in output, output[-4000:]

        stranded = row(pg_fresh_dsn, "SELECT status FROM run WHERE id = %s", run_id)
        assert stranded == ("RUNNING",), stranded

        boot2 = VesselProcess(pg_fresh_dsn, tmp_path, "boot2", port=boot1.port)
        processes.append(boot2.start())
        boot2.wait_ready(client)
        # boot 1's lease (runtime/recovery/boot_lease.py) has not expired when
        # boot 2 starts, so boot 2's relay, not its startup, fails the hop.
        deadline = time.monotonic() + 60
        run = client.get(f"{boot2.url}/runs/{run_id}", headers=AUTH).json()
        while run["status"] == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.5)
            run = client.get(f"{boot2.url}/runs/{run_id}", headers=AUTH).json()
        assert run["status"] == "FAILED" and run["error"].startswith("lost"), run
        assert boot2.stop() in (0, -15), boot2.output()[-3000:]
