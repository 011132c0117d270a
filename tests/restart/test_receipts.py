"""One real two-boot PostgreSQL lifecycle per crash window (harness receipts).

Each test provisions a fresh database, kills boot 1 by SIGKILL exactly at
its window, restarts, drives the Run to its end over HTTP, runs the
simulator's history-free invariants over the PostgreSQL ledger, and asserts
the window's prescribed outcome (the receipt's verdict says all of that).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.receipts.lifecycle import prove
from harness.receipts.windows import WINDOWS, Window
from tests.restart.kept import keep

pytestmark = pytest.mark.restart

REACHABLE = [w for w in WINDOWS.values() if w.unreachable is None]


@pytest.mark.parametrize("window", REACHABLE, ids=[w.point for w in REACHABLE])
def test_window_is_proved_by_a_real_restart(
    window: Window, pg_dsn: str, tmp_path: Path
) -> None:
    receipt = prove(window, pg_dsn, tmp_path)
    assert receipt["verdict"] == "proved", json.dumps(receipt.get("problems") or
                                                      receipt.get("reason"), indent=2)
    boot1, boot2 = receipt["boots"]
    assert boot1["exit_signal"] == "SIGKILL" and boot1["crash_plan"] == window.point
    assert boot1["pid"] != boot2["pid"] and boot1["boot_id"] != boot2["boot_id"]
    assert receipt["final"] == window.expect
    assert all(inv["held"] for inv in receipt["invariants"])
    assert (tmp_path / f"{window.point}.json").exists()
    keep(tmp_path, window.point)


def test_unreachable_windows_are_reported_missing_not_proved(tmp_path: Path) -> None:
    for window in WINDOWS.values():
        if window.unreachable:
            receipt = prove(window, "postgresql://unused", tmp_path)
            assert receipt["verdict"] == "missing" and receipt["reason"]
