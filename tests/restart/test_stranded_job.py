"""A real `vessel serve` re-delivers a dead boot's dequeued, unclaimed SAQ job
promptly (issue 15, M11 item 3: no wait for SAQ's sweep).

1. a Vessel migrates the database and stops;
2. this test admits an echo Run through a PostgreSQL Vessel of its own
   (boot `boot-ghost`, which never registers a lease: dead) and takes the
   Run's SAQ job as that boot's worker would, then leaves: the job stays
   active, stamped with `boot-ghost`, its Run QUEUED and never claimed;
3. a new `vessel serve` finishes the Run long before SAQ's 120 s heartbeat
   could have let the sweep end the job: once its own lease is steady (one
   lease, 15 s) its relay retires the stranded job and publishes a fresh
   sequence under its own key.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from harness.receipts.process import VesselProcess
from runtime.adapters.saq import SaqBroker
from runtime.app.profiles import postgres_vessel
from runtime.keys import hop_key
from runtime.models import Intent
from runtime.recovery.deliveries import STRANDED
from tests.restart.probes import row, wait_for

pytestmark = pytest.mark.restart


async def _strand(dsn: str) -> str:
    """Admit a Run and take its job as dead boot `boot-ghost`'s worker would."""
    async with postgres_vessel(dsn, boot_id="boot-ghost") as vessel:
        sub = await vessel.engine.submit(Intent(pattern="echo", sigil="alice", prompt="ghost"))
        broker = vessel.deps.broker
        assert isinstance(broker, SaqBroker)
        job = await broker.dequeue("runs", timeout_s=2.0, boot_id="boot-ghost")
        assert job is not None and job.run_id == sub.run.id and job.boot_id == "boot-ghost"
        return str(sub.run.id)


def test_a_dead_boots_dequeued_job_is_redelivered_without_waiting_for_the_sweep(
    pg_fresh_dsn: str, tmp_path: Path, processes: list[VesselProcess]
) -> None:
    dsn = pg_fresh_dsn
    with httpx.Client(timeout=10) as client:
        first = VesselProcess(dsn, tmp_path, "migrator", migrate=True)
        processes.append(first.start())
        first.wait_ready(client)
        assert first.stop() in (0, -15), first.output()[-3000:]

        run_id = anyio.run(_strand, dsn)
        assert row(dsn, "SELECT status, seq FROM run WHERE id = %s", run_id) == ("QUEUED", 0)
        assert row(dsn, "SELECT status FROM saq_jobs WHERE key = %s",
                   hop_key(run_id, 0)) == ("active",)

        vessel = VesselProcess(dsn, tmp_path, "vessel")
        processes.append(vessel.start())
        vessel.wait_ready(client)
        # One lease to become steady, one relay pass, the hop: far below the 120 s
        # heartbeat after which SAQ's sweep would have ended the stranded job.
        wait_for(lambda: row(dsn, "SELECT status FROM run WHERE id = %s", run_id) == ("DONE",),
                 "the stranded Run done", within=60)
        assert vessel.stop() in (0, -15), vessel.output()[-3000:]

    assert row(dsn, "SELECT seq FROM run WHERE id = %s", run_id) == (1,)  # a fresh sequence
    old = row(dsn, "SELECT status, convert_from(job, 'UTF8')::jsonb ->> 'error'"
                   " FROM saq_jobs WHERE key = %s", hop_key(run_id, 0))
    assert old == ("aborted", STRANDED), old
