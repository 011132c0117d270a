"""A real `vessel serve` process, killed by its crash plan and started again.

DESIGN sections 5 and 7, seed 000_81a5c720b14d934a.txt ("Cancellation,
mutation, and recovery": startup fences each pre-boot generation before
failing orphaned RUNNING work as lost; uncheckpointed process death is
failed, never guessed forward):

1. boot 1 runs on a fresh PostgreSQL database with
   `VESSEL_CRASH_AT=claim.committed`; an echo Run is submitted over HTTP;
   the worker claims it and the process dies by SIGKILL (returncode -9) at
   exactly that window, leaving the Run RUNNING;
2. boot 2 starts without the plan, reconciles, and reports ready on
   `/health` with a different boot id; the Run is FAILED as lost, its
   delivery settled, and an idempotent replay of the same submission
   returns that same Run (200) instead of admitting it again.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.receipts.process import AUTH, VesselProcess
from tests.restart.probes import row

pytestmark = pytest.mark.restart


def until_terminal(client: httpx.Client, url: str, within_s: float = 60.0) -> dict[str, Any]:
    """The Run once terminal: boot 1's lease must expire first (issue 15, M11:
    another boot's work is recovered only once its lease ran out), then the
    relay of boot 2 fails it as lost."""
    deadline = time.monotonic() + within_s
    while True:
        run: dict[str, Any] = client.get(url, headers=AUTH).json()
        if run["status"] in ("DONE", "FAILED", "CANCELLED") or time.monotonic() > deadline:
            return run
        time.sleep(0.5)


def test_sigkill_at_claim_committed_then_restart_fails_the_run_as_lost(
    pg_fresh_dsn: str, tmp_path: Path, processes: list[VesselProcess]
) -> None:
    submission = {"pattern": "echo", "prompt": "die after the claim"}
    headers = {**AUTH, "Idempotency-Key": "restart-echo-1"}
    with httpx.Client(timeout=10) as client:
        boot1 = VesselProcess(pg_fresh_dsn, tmp_path, "boot1", crash_at="claim.committed",
                              migrate=True)
        processes.append(boot1.start())
        first_health = boot1.wait_ready(client)
        run_id: str | None = None
        try:
            admitted = client.post(f"{boot1.url}/runs", json=submission, headers=headers)
            assert admitted.status_code == 201, admitted.text
            run_id = admitted.json()["id"]
        except httpx.TransportError:
            pass  # the worker claimed (and the process died) before the answer was sent

        returncode = boot1.wait_death()
        assert returncode == -signal.SIGKILL, (returncode, boot1.output()[-3000:])
        assert "crash plan claim.committed:1: SIGKILL" in boot1.output()

        if run_id is not None:
            stranded = row(pg_fresh_dsn, "SELECT status FROM run WHERE id = %s", run_id)
            assert stranded == ("RUNNING",), stranded

        boot2 = VesselProcess(pg_fresh_dsn, tmp_path, "boot2", port=boot1.port)
        processes.append(boot2.start())
        second_health = boot2.wait_ready(client)
        assert second_health["phase"] == "ready" and second_health["profile"] == "postgres"
        assert second_health["strict"] is True and second_health["degraded"] == []
        assert second_health["boot_id"] != first_health["boot_id"]
        assert boot2.pid != boot1.pid

        replay = client.post(f"{boot2.url}/runs", json=submission, headers=headers)
        assert replay.status_code == 200, replay.text  # admitted once, in boot 1
        if run_id is not None:
            assert replay.json()["id"] == run_id
        run_id = replay.json()["id"]

        run = until_terminal(client, f"{boot2.url}/runs/{run_id}")
        assert run["status"] == "FAILED", run
        assert run["error"].startswith("lost"), run
        assert run["started_at"] is not None and run["result"] is None
        delivery = row(pg_fresh_dsn,
                       "SELECT state FROM run_delivery WHERE run_id = %s AND seq = 0", run_id)
        assert delivery is not None and delivery[0] in ("SETTLED", "FAILED"), delivery

        events = client.get(f"{boot2.url}/runs/{run_id}/events", headers=AUTH)
        assert events.status_code == 200 and "event: resync" in events.text
        assert '"status":"FAILED"' in events.text

        stopped = boot2.stop()
        assert stopped in (0, -signal.SIGTERM), (stopped, boot2.output()[-3000:])
        assert "Traceback" not in boot2.output(), boot2.output()[-3000:]
