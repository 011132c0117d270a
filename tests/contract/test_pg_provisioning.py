"""PostgreSQL provisioning (harness/pg.py) and bounded connection failures.

DESIGN section 7: without HARNESS_PG_DSN the harness starts its own ephemeral
cluster; a DSN that cannot connect fails with one clear error within a
bounded time and leaves no pool behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.pg import DSN_ENV, PostgresUnavailable, fresh_database, provision, with_dbname
from harness.pg_cluster import free_port
from harness.pg_fixtures import unavailable
from runtime.adapters.postgres import ConnectFailed, PostgresLedger, migrate
from runtime.adapters.postgres.connect import open_pool
from runtime.models import DeliveryState
from tests.bounds import HANG_S
from tests.contract.ledger_records import at, make_delivery, make_run, uid

pytestmark = pytest.mark.anyio

BOUND_S = 2.0
"""The connect bound under test; the error names it. The wall time a refusal takes is
only told from a hang (tests.bounds.HANG_S): a loaded machine takes longer than 2 s."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg's AsyncConnection does not run under trio


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


@pytest.mark.postgres
async def test_ephemeral_cluster_serves_a_ledger_without_a_configured_dsn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(provision(container=False))
        except PostgresUnavailable as exc:
            unavailable(str(exc))
        assert server.source == "ephemeral" and server.owned
        dsn = stack.enter_context(fresh_database(server.dsn))
        await migrate(dsn)
        async with await PostgresLedger.connect(dsn) as ledger:
            run = make_run(uid(1))
            delivery = make_delivery(run, state=DeliveryState.HELD)
            await ledger.admit_run(run, delivery)
            released = await ledger.release_held(run.id, 0, at(1))
            assert released is not None and released.state is DeliveryState.PENDING
            assert await ledger.get_run(run.id) == run
            dump = await ledger.dump()
            assert (dump.runs, dump.deliveries) == ([run], [released])


@pytest.mark.parametrize("where", ["refused", "black_hole"])
async def test_a_dsn_that_cannot_connect_fails_clearly_within_the_bound(
    where: str, black_hole: int
) -> None:
    port = free_port() if where == "refused" else black_hole
    dsn = f"postgresql://postgres@127.0.0.1:{port}/nowhere"
    for attempt in (
        lambda: PostgresLedger.connect(dsn, timeout_s=BOUND_S),
        lambda: migrate(dsn, timeout_s=BOUND_S),
    ):
        started = time.monotonic()
        with pytest.raises(ConnectFailed) as failed:
            await attempt()
        assert time.monotonic() - started < HANG_S
        assert f"127.0.0.1:{port}/nowhere" in str(failed.value)
        assert f"within {BOUND_S:g} s" in str(failed.value)


async def test_a_pool_that_cannot_open_is_closed_before_the_error(black_hole: int) -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{black_hole}/nowhere"
    before = set(asyncio.all_tasks())
    started = time.monotonic()
    with pytest.raises(ConnectFailed):
        await open_pool(dsn, min_size=1, max_size=2, timeout_s=BOUND_S)
    assert time.monotonic() - started < HANG_S
    await asyncio.sleep(0.1)
    leaked = [t for t in set(asyncio.all_tasks()) - before if not t.done()]
    assert leaked == []


@pytest.mark.postgres
async def test_a_missing_database_is_named_in_the_error(pg_dsn: str) -> None:
    dsn = with_dbname(pg_dsn, "no_such_database_here")
    with pytest.raises(ConnectFailed, match="no_such_database_here"):
        await PostgresLedger.connect(dsn, timeout_s=BOUND_S)


def test_with_dbname_keeps_server_and_form() -> None:
    assert (
        with_dbname("postgresql://u:p@h:5/a?sslmode=disable", "b")
        == "postgresql://u:p@h:5/b?sslmode=disable"
    )
    assert "dbname=b" in with_dbname("host=h port=5 dbname=a", "b")


UNAVAILABLE_CONFTEST = """
import contextlib
import harness.pg_fixtures
from harness.pg import PostgresUnavailable

@contextlib.contextmanager
def nothing(**_):
    raise PostgresUnavailable("no PostgreSQL available: simulated for this test")
    yield

harness.pg_fixtures.provision = nothing
"""


@pytest.mark.parametrize("require", ["", "1"])
def test_missing_postgres_skips_or_fails_under_require(
    require: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conftest.py").write_text(UNAVAILABLE_CONFTEST)
    (tmp_path / "test_needs_pg.py").write_text("def test_x(pg_dsn):\n    pass\n")
    monkeypatch.setenv("HARNESS_REQUIRE_PG", require)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "simulated for this test" in done.stdout
    if require:
        assert done.returncode == 1 and "1 error" in done.stdout
    else:
        assert done.returncode == 0 and "1 skipped" in done.stdout
