"""pytest fixtures for PostgreSQL (registered by `harness.pytest_plugin`).

`pg_dsn` (session): one server for the whole session from `harness.pg.provision`
(HARNESS_PG_DSN, else an ephemeral cluster, else a container); when none is
available the requesting test is skipped with the reason, or fails when
HARNESS_REQUIRE_PG=1. `pg_fresh_dsn` (function): a new empty database on that
server for one test, dropped afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NoReturn

import pytest

from harness.pg import PostgresUnavailable, Provisioned, fresh_database, provision, required


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail under HARNESS_REQUIRE_PG=1."""
    if required():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Provisioned]:
    try:
        with provision() as server:
            yield server
    except PostgresUnavailable as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def pg_dsn(pg_server: Provisioned) -> str:
    return pg_server.dsn


@pytest.fixture
def pg_fresh_dsn(pg_dsn: str) -> Iterator[str]:
    with fresh_database(pg_dsn) as dsn:
        yield dsn
