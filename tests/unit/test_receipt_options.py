"""`harness receipts --db-prefix` and `--ports` (issue M15): the databases the
receipts create carry the prefix, the Vessels they spawn bind inside the
range, and a bad value is one line and exit 2 before anything runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import pg
from harness.cli import main
from harness.receipts import process


def _exit(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return int(info.value.code or 0)


@pytest.mark.parametrize(("argv", "word"), [
    (["--db-prefix", "Bad-Name"], "--db-prefix"),
    (["--db-prefix", "9x"], "--db-prefix"),
    (["--ports", "9-1"], "--ports"),
    (["--ports", "80-90"], "--ports"),
    (["--ports", "x"], "--ports"),
])
def test_bad_receipt_options_are_refused_before_any_work(
    argv: list[str], word: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("PostgreSQL provisioned for refused options")

    monkeypatch.setattr(pg, "provision", no_work)
    assert _exit(["receipts", "--all", "--out", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and word in err


def test_spawned_vessels_take_ports_in_turn_from_the_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(process.PORTS_ENV, "38100-38103")
    monkeypatch.setattr(process, "_next_in_range", {})
    ports = [process.free_port() for _ in range(5)]
    assert all(38100 <= p <= 38103 for p in ports)
    assert ports[0] != ports[1] != ports[2]  # two Vessels made before binding never collide
    assert process.VesselProcess("dsn", Path("."), "boot1").port in range(38100, 38104)


def test_a_full_range_is_a_receipt_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        held.listen()
        monkeypatch.setenv(process.PORTS_ENV, f"{port}-{port}")
        with pytest.raises(process.ReceiptError, match="no free port"):
            process.free_port()


@pytest.mark.postgres
def test_receipt_databases_carry_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = os.environ.get(pg.DSN_ENV)
    if not dsn:
        pytest.skip("needs HARNESS_PG_DSN (a PostgreSQL server)")
    monkeypatch.setenv(pg.DB_PREFIX_ENV, "m15ci")
    with pg.fresh_database(dsn, prefix="receipt") as fresh:
        assert "/m15ci_receipt_" in fresh
        with pg._admin(fresh) as conn:
            row = conn.execute("SELECT current_database()").fetchone()
        assert row is not None and str(row[0]).startswith("m15ci_receipt_")
