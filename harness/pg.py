"""PostgreSQL provisioning for tests, the harness CLI and restart receipts (DESIGN section 7).

`provision()` yields a reachable server, trying in order:
1. `HARNESS_PG_DSN`: an existing server, used as given;
2. an ephemeral local cluster (`harness.pg_cluster`), torn down on exit;
3. a testcontainers `PostgresContainer`, when a Docker engine answers.
When none is available it raises `PostgresUnavailable` naming each reason.
`fresh_database(dsn)` yields a DSN to a newly created, uniquely named
database on that server and drops it afterwards, so callers never see each
other's rows. This module is plain Python; the pytest fixtures live in
`harness.pg_fixtures`.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from harness.pg_cluster import ClusterUnavailable, ephemeral_cluster

DSN_ENV = "HARNESS_PG_DSN"
DB_PREFIX_ENV = "HARNESS_DB_PREFIX"
"""Prepended to every database `fresh_database` creates (`harness receipts --db-prefix`)."""
REQUIRE_ENV = "HARNESS_REQUIRE_PG"
IMAGE_ENV = "HARNESS_PG_IMAGE"
DEFAULT_IMAGE = "postgres:15-alpine"
ADMIN_CONNECT_TIMEOUT_S = 5


class PostgresUnavailable(Exception):
    """No PostgreSQL could be provisioned; the message lists why each source failed."""


@dataclass(frozen=True)
class Provisioned:
    dsn: str
    source: str
    """`env`, `ephemeral` or `container`."""

    @property
    def owned(self) -> bool:
        """True when the harness started this server (so it may stop or restart it)."""
        return self.source != "env"


def required() -> bool:
    """HARNESS_REQUIRE_PG=1: a missing PostgreSQL is a failure, not a skip."""
    return os.environ.get(REQUIRE_ENV) == "1"


@contextlib.contextmanager
def provision(
    *, env: bool = True, ephemeral: bool = True, container: bool = True
) -> Iterator[Provisioned]:
    """Yield the first available server of the enabled sources (see the module docstring)."""
    reasons: list[str] = []
    if env:
        dsn = os.environ.get(DSN_ENV)
        if dsn:
            yield Provisioned(dsn, "env")
            return
        reasons.append(f"{DSN_ENV} is not set")
    with contextlib.ExitStack() as stack:
        found: Provisioned | None = None
        if ephemeral:
            try:
                found = Provisioned(stack.enter_context(ephemeral_cluster()), "ephemeral")
            except ClusterUnavailable as exc:
                reasons.append(f"ephemeral cluster: {exc}")
        if found is None and container:
            try:
                found = Provisioned(stack.enter_context(postgres_container()), "container")
            except PostgresUnavailable as exc:
                reasons.append(f"container: {exc}")
        if found is None:
            raise PostgresUnavailable("no PostgreSQL available: " + "; ".join(reasons))
        yield found


@contextlib.contextmanager
def postgres_container(image: str | None = None) -> Iterator[str]:
    """A testcontainers PostgreSQL; fails fast (PostgresUnavailable) when Docker is absent."""
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError as exc:
        raise PostgresUnavailable(f"testcontainers is not installed ({exc})") from exc
    try:
        box = PostgresContainer(image or os.environ.get(IMAGE_ENV, DEFAULT_IMAGE), driver=None)
    except Exception as exc:  # docker.errors.DockerException: no engine answers
        raise PostgresUnavailable(f"no Docker engine answers ({_first_line(exc)})") from exc
    try:
        box.start()
    except Exception as exc:
        with contextlib.suppress(Exception):
            box.stop()
        raise PostgresUnavailable(f"container did not start ({_first_line(exc)})") from exc
    try:
        yield box.get_connection_url(driver=None)
    finally:
        box.stop()


def with_dbname(dsn: str, dbname: str) -> str:
    """The same server and credentials, another database; keeps URL or key=value form."""
    if dsn.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(dsn)
        return urlunsplit(parts._replace(path="/" + dbname))
    return make_conninfo(dsn, dbname=dbname)


@contextlib.contextmanager
def fresh_database(dsn: str, prefix: str = "harness") -> Iterator[str]:
    """Create an empty database with a unique name on `dsn`'s server; drop it on exit.

    The database named in `dsn` is only the maintenance connection that
    creates and drops it. The name is `[$HARNESS_DB_PREFIX_]<prefix>_<16 hex>`.
    """
    outer = os.environ.get(DB_PREFIX_ENV)
    name = f"{outer + '_' if outer else ''}{prefix}_{uuid.uuid4().hex[:16]}"
    with _admin(dsn) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_dbname(dsn, name)
    finally:
        with _admin(dsn) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def _admin(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(dsn, autocommit=True, connect_timeout=ADMIN_CONNECT_TIMEOUT_S)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
