"""`harness receipts --app`: a real two-boot PostgreSQL restart of the example
shop's own `checkout` Pattern (issue 16 acceptance).

Both boots are `vessel serve --app shop.sim:app`; boot 1 dies by SIGKILL right
after it saved the consent row of a big order, boot 2 finds the Run parked,
the consent is approved and the checkout ends DONE after exactly one resume.
The example is imported from examples/shop (the working directory), as a user
runs the command from their own project.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app as harness_cli

pytestmark = pytest.mark.restart

SHOP = Path(__file__).resolve().parents[2] / "examples" / "shop"


def test_receipts_prove_a_crash_window_of_the_shops_own_pattern(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(SHOP)
    out = tmp_path / "receipts"
    result = CliRunner().invoke(harness_cli, [
        "receipts", "--app", "shop.sim:app", "--window", "consent.row_saved",
        "--window", "effect.applied", "--dsn", pg_dsn, "--out", str(out)])
    assert result.exit_code == 0, result.output
    receipt = json.loads((out / "consent.row_saved.json").read_text())
    assert receipt["verdict"] == "proved", receipt.get("problems") or receipt.get("reason")
    assert receipt["scenario"] == "app:shop.sim:app:checkout"
    assert receipt["final"] == "DONE"
    boot1, boot2 = receipt["boots"]
    assert boot1["exit_signal"] == "SIGKILL" and boot1["crash_plan"] == "consent.row_saved"
    assert boot1["pid"] != boot2["pid"]
    for boot in ("boot1", "boot2"):
        log = (out / "consent.row_saved" / f"{boot}.log").read_text()
        assert "serving the Patterns of --app shop.sim:app: checkout" in log
    # checkout applies no ctx.effect, so no sample reaches effect.applied: missing, not failed
    missing = json.loads((out / "effect.applied.json").read_text())
    assert missing["verdict"] == "missing" and "no sample" in missing["reason"]
    index = json.loads((out / "index.json").read_text())
    assert {w["window"]: w["verdict"] for w in index["windows"]}["consent.row_saved"] == "proved"
    assert index["leased"] == []
