"""`vessel serve`, `vessel migrate`, `vessel faults`: user mistakes end with exit
status 2 and one line, never a traceback, and before anything is bound or
written (runtime.app.cli)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from runtime.app.cli import OneLineLifespanErrors, cli, main, one_line_error
from runtime.faults import CATALOGUE

CLEAN_ENV: dict[str, str | None] = {
    "VESSEL_TOKENS": None, "VESSEL_TOKEN": None, "VESSEL_CRASH_AT": None, "VESSEL_DSN": None,
}


def invoke(args: list[str], **env: str) -> Any:
    return CliRunner().invoke(cli, args, env={**CLEAN_ENV, **env}, catch_exceptions=False)


def assert_one_line_usage_error(result: Any, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("vessel: "), result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(("args", "env", "words"), [
    (["serve"], {"VESSEL_TOKEN": "t"}, ["--dsn", "--memory"]),
    (["serve", "--memory", "--dsn", "postgresql://x"], {"VESSEL_TOKEN": "t"}, ["exactly one"]),
    (["serve", "--memory"], {}, ["no credentials", "VESSEL_TOKENS"]),
    (["serve", "--memory"], {"VESSEL_TOKENS": "alice"}, ["principal:token"]),
    (["serve", "--memory"], {"VESSEL_TOKEN": "t", "VESSEL_CRASH_AT": "claim.comitted"},
     ["unknown fault point", "claim.committed"]),
    (["serve", "--memory"], {"VESSEL_TOKEN": "t", "VESSEL_CRASH_AT": "claim.committed:0"},
     ["1 or more"]),
    (["serve", "--memory", "--insecure-local", "--host", "0.0.0.0"], {}, ["loopback"]),
    (["serve", "--memory", "--migrate"], {"VESSEL_TOKEN": "t"}, ["--migrate needs --dsn"]),
    (["serve", "--memory", "--services", "real"], {"VESSEL_TOKEN": "t"},
     ["--services must be reference or none", "'real'"]),
    (["serve", "--dsn", "postgresql://postgres@127.0.0.1:1/none"], {"VESSEL_TOKEN": "t"},
     ["cannot connect", "127.0.0.1:1"]),
    (["serve", "--dsn", "not a dsn"], {"VESSEL_TOKEN": "t"}, ["cannot connect"]),
    (["migrate"], {}, ["--dsn"]),
    (["migrate", "--dsn", "postgresql://postgres@127.0.0.1:1/none"], {}, ["cannot connect"]),
    (["migrate", "--dsn", "not a dsn"], {}, ["cannot connect"]),
])
def test_user_mistakes_exit_2_with_one_line(
    args: list[str], env: dict[str, str], words: list[str]
) -> None:
    assert_one_line_usage_error(invoke(args, **env), *words)


@pytest.mark.parametrize(("argv", "words"), [
    (["serve", "--bogus"], ["No such option: --bogus", "vessel serve --help"]),
    (["serve", "--port", "abc"], ["--port", "integer"]),
    (["serve", "--port", "70000"], ["--port"]),
    (["nope"], ["No such command", "vessel --help"]),
])
def test_command_line_usage_mistakes_are_one_line_and_exit_2(
    argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("vessel: ") and "Traceback" not in err
    for word in words:
        assert word in lines[0], lines[0]


def test_faults_lists_the_whole_catalogue() -> None:
    result = invoke(["faults", "--json"])
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert [r["name"] for r in rows] == sorted(CATALOGUE)
    table = invoke(["faults"])
    assert table.exit_code == 0 and all(name in table.output for name in CATALOGUE)


def test_a_failed_startup_reaches_the_server_as_one_line() -> None:
    sent: list[dict[str, object]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "lifespan.startup.failed",
                    "message": "Traceback (most recent call last):\n  File x\n"
                               "runtime.app.lifespan.StartupRefused: degraded: orphan\n"})

    async def record(message: dict[str, object]) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "lifespan.startup"}

    anyio.run(OneLineLifespanErrors(app), {"type": "lifespan"}, receive, record)
    assert sent == [{"type": "lifespan.startup.failed",
                     "message": "runtime.app.lifespan.StartupRefused: degraded: orphan"}]


@pytest.mark.postgres
def test_migrate_applies_then_reports_current_and_serve_refuses_an_old_schema(
    pg_fresh_dsn: str,
) -> None:
    refused = invoke(["serve", "--dsn", pg_fresh_dsn], VESSEL_TOKEN="t")
    assert_one_line_usage_error(refused, "vessel migrate")
    first = invoke(["migrate", "--dsn", pg_fresh_dsn])
    assert first.exit_code == 0, first.output
    assert first.output.startswith("schema version 0 -> ") and "applied 0001" in first.output
    again = invoke(["migrate", "--dsn", pg_fresh_dsn])
    assert again.exit_code == 0 and "nothing applied" in again.output


def test_a_multi_line_database_error_reaches_the_server_whole_on_one_line() -> None:
    sent: list[dict[str, object]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            raise ConnectionError('connection failed: server at "db" refused\n'
                                  "Is the server running on that host and accepting TCP/IP?")
        except ConnectionError:
            await send({"type": "lifespan.startup.failed", "message": "Traceback ..."})

    async def record(message: dict[str, object]) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "lifespan.startup"}

    anyio.run(OneLineLifespanErrors(app), {"type": "lifespan"}, receive, record)
    assert sent == [{"type": "lifespan.startup.failed",
                     "message": 'ConnectionError: connection failed: server at "db" refused '
                                "Is the server running on that host and accepting TCP/IP?"}]


def test_a_traceback_text_keeps_every_line_after_its_last_frame() -> None:
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n    boom()\n"
            "psycopg.OperationalError: connection failed\nsecond line of it\n")
    assert one_line_error(text) == "psycopg.OperationalError: connection failed second line of it"


def test_a_startup_that_cannot_serve_exits_1_as_documented_not_uvicorns_3() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke(["serve", "--memory", "--insecure-local", "--port", str(port)])
    assert result.exit_code == 1, result.output
    assert "vessel: startup failed" in result.output
