"""Small reads of the database and waits that the restart tests share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg


def row(dsn: str, sql: str, *params: object) -> tuple[Any, ...] | None:
    """The first row `sql` returns on its own short-lived connection."""
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        return conn.execute(sql, params).fetchone()


def wait_for(predicate: Callable[[], object], what: str, within: float = 30.0) -> None:
    """Poll `predicate` every 0.1 s until true; fail naming `what` after `within` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {within:g} s")
