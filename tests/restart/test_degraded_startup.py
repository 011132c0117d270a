"""A real `vessel serve` on PostgreSQL refuses a degraded startup (issue M12, item 5).

Seed 000_81a5c720b14d934a.txt ("Cancellation, mutation, and recovery"):
missing or mismatched delivery truth makes the pass degraded, and PostgreSQL
startup aborts before publishing workers or HTTP services when required
reconciliation is degraded.

1. boot 1 (fresh database) admits an echo Run over HTTP and dies by SIGKILL
   at `publish.sent_before_ack`: the Run stays QUEUED at sequence 0;
2. the Run's delivery row is then put out of step with it (SETTLED while
   the Run waits QUEUED), as a torn write or a bad manual repair would;
3. boot 2 reconciles, finds the mismatch, and exits with status 1 after one
   line naming the reason; it never reports ready, the Run is untouched.

The simulator checks the same rule (`startup_degrades_honestly`, scenario
`degraded_startup`); this is the process-level proof of the exit.
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import httpx
import psycopg
import pytest

from harness.receipts.process import AUTH, VesselProcess
from tests.restart.probes import row

pytestmark = pytest.mark.restart

REASON = "startup refused, reconciliation degraded: QUEUED Runs whose delivery row does not match"


def test_a_mismatched_delivery_row_makes_postgres_startup_exit_1_with_one_line(
    pg_fresh_dsn: str, tmp_path: Path, processes: list[VesselProcess]
) -> None:
    with httpx.Client(timeout=10) as client:
        boot1 = VesselProcess(pg_fresh_dsn, tmp_path, "boot1",
                              crash_at="publish.sent_before_ack", migrate=True)
        processes.append(boot1.start())
        boot1.wait_ready(client)
        with contextlib.suppress(httpx.TransportError):  # it may die before it answers
            client.post(f"{boot1.url}/runs", json={"pattern": "echo", "prompt": "drift"},
                        headers={**AUTH, "Idempotency-Key": "degraded-1"})
        assert boot1.wait_death() == -signal.SIGKILL, boot1.output()[-3000:]

    queued = row(pg_fresh_dsn, "SELECT id, status, seq FROM run")
    assert queued is not None and queued[1:] == ("QUEUED", 0), queued
    with psycopg.connect(pg_fresh_dsn, connect_timeout=5) as conn:
        conn.execute("UPDATE run_delivery SET state = 'SETTLED' WHERE run_id = %s AND seq = 0",
                     (queued[0],))

    boot2 = VesselProcess(pg_fresh_dsn, tmp_path, "boot2", port=boot1.port)
    processes.append(boot2.start())
    code = boot2.wait_death(within=60)
    output = boot2.output()
    assert code == 1, (code, output[-3000:])
    assert [line for line in output.splitlines() if "startup refused" in line] \
        and all(REASON in line for line in output.splitlines() if "startup refused" in line), \
        output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "Application startup complete" not in output  # never served
    after = row(pg_fresh_dsn, "SELECT status, seq FROM run WHERE id = %s", queued[0])
    assert after == ("QUEUED", 0), after  # left alone, for an operator to repair
