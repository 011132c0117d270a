"""The pytest plugin (entry point pytest11): fixtures for worlds and databases."""

from __future__ import annotations

from harness.pg_fixtures import pg_dsn, pg_fresh_dsn, pg_server

__all__ = ["pg_dsn", "pg_fresh_dsn", "pg_server"]
