"""The pytest plugin (entry point pytest11): fixtures for worlds and databases."""

from __future__ import annotations

from harness.pg import pg_dsn

__all__ = ["pg_dsn"]
