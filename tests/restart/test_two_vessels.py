"""Two `vessel serve` on one database under load; one is SIGKILLed (issue 15, M11).

The acceptance test of several Vessels on one PostgreSQL, run as the receipt
check `vessels.two_on_one_database` (harness.receipts.vessels, which
`harness receipts` proves too): both Vessels serve the same queue and hold
chatty hops when one is killed and never restarted. The receipt must prove
that no Run of the live Vessel was failed, that the dead Vessel's hops were
recovered by the survivor (terminal, failed only as lost, after the dead
boot's lease lapsed), that the survivor kept serving, and that every Run has
exactly one terminal Step; the simulator's history-free invariants hold over
its rows. The test keeps the receipt for the gate (tests/restart/kept.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.receipts.leased_checks import run_check
from harness.receipts.vessels import KIND, VESSEL_CHECKS
from tests.restart.kept import keep

pytestmark = [pytest.mark.restart, pytest.mark.timeout(240)]

NAME = "vessels.two_on_one_database"


def test_a_vessel_killed_beside_a_live_one_is_recovered_by_it_and_fails_none_of_its_runs(
    pg_dsn: str, tmp_path: Path
) -> None:
    receipt = run_check(VESSEL_CHECKS[NAME], pg_dsn, tmp_path)
    assert receipt["verdict"] == "proved", receipt.get("reason") or json.dumps(
        receipt.get("problems"), indent=2)
    assert receipt["window"] == NAME and receipt["kind"] == KIND and not receipt["problems"]
    assert all(inv["held"] for inv in receipt["invariants"])
    seen = receipt["observed"]
    assert seen["live_boot"] != seen["dead_boot"] and seen["dead_held"] and seen["live_held"]
    assert seen["recovered_as_lost"]  # the survivor took over the dead boot's hops
    signals = {p["name"]: p["exit_signal"] for p in receipt["processes"]}
    assert signals["vessel2"] == "SIGKILL" and signals["vessel1"] != "SIGKILL"
    keep(tmp_path, NAME)
