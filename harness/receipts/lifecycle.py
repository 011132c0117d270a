"""The two-boot lifecycle of one window, and the restart receipt it writes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import platform
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

from harness.catalogue_check import code_digest
from harness.pg import fresh_database
from harness.receipts.process import ReceiptError, VesselProcess
from harness.receipts.windows import WINDOWS, Drive, Window, to_the_end
from runtime.models import LedgerDump
from sim.checker import check_static


@dataclass
class Snapshot:
    dump: LedgerDump
    jobs: dict[str, dict[str, Any]]

    def digest(self) -> str:
        blob = self.dump.model_dump_json() + json.dumps(self.jobs, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def rows(self) -> dict[str, Any]:
        return {
            "runs": [r.model_dump(mode="json", include={"id", "status", "seq", "error",
                                                       "consent_id", "agent_job_id",
                                                       "service_attempt_id"})
                     for r in self.dump.runs],
            "deliveries": [d.model_dump(mode="json", include={"seq", "state", "mode"})
                           for d in self.dump.deliveries],
            "consents": [c.model_dump(mode="json", include={"id", "status"})
                         for c in self.dump.consents],
            "agent_jobs": [j.model_dump(mode="json", include={"id", "status"})
                           for j in self.dump.agent_jobs],
            "checkpoints": len(self.dump.checkpoints),
            "steps": [s.kind for s in self.dump.steps],
            "saq_jobs": self.jobs,
        }


def snapshot(dsn: str) -> Snapshot:
    from runtime.adapters.postgres import PostgresLedger

    async def dump() -> LedgerDump:
        ledger = await PostgresLedger.connect(dsn)
        try:
            return await ledger.dump()
        finally:
            await ledger.close()

    jobs: dict[str, dict[str, Any]] = {}
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        exists = conn.execute("SELECT to_regclass('saq_jobs')").fetchone()
        if exists and exists[0]:
            for key, status, priority in conn.execute(
                "SELECT key, status, priority FROM saq_jobs ORDER BY key"
            ):
                jobs[key] = {"status": status, "priority": priority}
    return Snapshot(asyncio.run(dump()), jobs)


def versions(dsn: str) -> dict[str, str]:
    from importlib.metadata import version

    with psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return {
        "python": platform.python_version(),
        "postgresql": str(row[0]) if row else "unknown",
        "saq": version("saq"),
        "psycopg": version("psycopg"),
        "project": version("vessel-harness"),
    }


def prove(window: Window, server_dsn: str, out: Path) -> dict[str, Any]:
    """Run the lifecycle on a fresh database; write and return the receipt."""
    out.mkdir(parents=True, exist_ok=True)
    receipt: dict[str, Any] = {
        "window": window.point, "scenario": window.scenario, "seed": None,
        "code_digest": code_digest(), "expected": window.expect, "boots": [],
        "started_at": time.time(),
    }
    if window.unreachable:
        receipt.update(verdict="missing", reason=window.unreachable)
        _write(out, window, receipt)
        return receipt
    workdir = out / window.point
    workdir.mkdir(parents=True, exist_ok=True)
    boots: list[VesselProcess] = []
    try:
        with fresh_database(server_dsn, prefix="receipt") as dsn:
            receipt["versions"] = versions(dsn)
            _lifecycle(window, dsn, workdir, boots, receipt)
    except ReceiptError as exc:
        receipt.update(verdict="failed", reason=str(exc))
    finally:
        for boot in boots:
            boot.kill()
        receipt["boots"] = [b.describe() for b in boots]
        receipt["ended_at"] = time.time()
    _write(out, window, receipt)
    return receipt


def _lifecycle(
    window: Window, dsn: str, workdir: Path, boots: list[VesselProcess], receipt: dict[str, Any]
) -> None:
    drive = Drive(window.pattern, dict(window.content), dsn=dsn)
    with httpx.Client(timeout=15) as client:
        boot1 = VesselProcess(dsn, workdir, "boot1", crash_at=window.point, migrate=True,
                              args=window.serve_args())
        boots.append(boot1.start())
        if not window.dies_before_ready:
            boot1.wait_ready(client)
            window.into(client, boot1, drive)
        code = boot1.wait_death()
        if code != -signal.SIGKILL:
            raise ReceiptError(f"boot 1 ended with {code}, not SIGKILL at {window.point}")
        if f"crash plan {window.point}" not in boot1.output():
            raise ReceiptError(f"boot 1 died, but not at {window.point}")
        before = snapshot(dsn)
        boot2 = VesselProcess(dsn, workdir, "boot2", port=boot1.port, args=window.serve_args())
        boots.append(boot2.start())
        health = boot2.wait_ready(client)
        view = to_the_end(client, boot2, drive)
        after = snapshot(dsn)
        boot2.stop()
    problems = [] if view["status"] == window.expect else [
        f"expected {window.expect}, the Run ended {view['status']} ({view.get('error')})"]
    for check in window.checks:
        problems += check(after.dump, drive)
    invariants = check_static(after.dump, after.jobs)
    problems += [f"{v['invariant']}: {v['message']}" for v in invariants if not v["held"]]
    different = boot1.pid != boot2.pid and boot1.boot_id != boot2.boot_id
    if not different:
        problems.append("the two boots are not distinct processes")
    receipt.update(
        run_id=drive.run_id, notes=drive.notes, final=view["status"], health=health,
        ledger_before={"digest": before.digest(), "rows": before.rows()},
        ledger_after={"digest": after.digest(), "rows": after.rows()},
        invariants=invariants, problems=problems,
        verdict="proved" if not problems else "failed",
    )


def _write(out: Path, window: Window, receipt: dict[str, Any]) -> None:
    (out / f"{window.point}.json").write_text(json.dumps(receipt, indent=2, sort_keys=True,
                                                         default=str) + "\n")


def selected(names: list[str], everything: bool) -> list[Window]:
    if everything or not names:
        return list(WINDOWS.values())
    unknown = [n for n in names if n not in WINDOWS]
    if unknown:
        raise KeyError(f"unknown windows {unknown}; known: {', '.join(WINDOWS)}")
    return [WINDOWS[n] for n in names]
