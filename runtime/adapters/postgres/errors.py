"""Errors of the PostgreSQL adapter: each says what failed and what to do about it."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from runtime.errors import RuntimeEngineError


class ConnectFailed(RuntimeEngineError):
    """The database could not be reached within the connect bound; nothing stays open."""

    def __init__(self, target: str, timeout_s: float, reason: str) -> None:
        super().__init__(
            f"cannot connect to PostgreSQL at {target} within {timeout_s:g} s: {reason}"
        )
        self.target = target
        self.timeout_s = timeout_s
        self.reason = reason


class SchemaVersionError(RuntimeEngineError):
    """The database schema is not the version this code was written for."""

    def __init__(self, database_version: int, code_version: int, advice: str) -> None:
        super().__init__(
            f"database schema version {database_version}, this code's newest migration is "
            f"{code_version}: {advice}"
        )
        self.database_version = database_version
        self.code_version = code_version


class SchemaTooNew(SchemaVersionError):
    """The database was migrated by newer code; this code refuses to touch it."""

    def __init__(self, database_version: int, code_version: int) -> None:
        super().__init__(
            database_version, code_version, "refusing to run older code against a newer schema"
        )


class SchemaTooOld(SchemaVersionError):
    """The database lacks migrations this code needs."""

    def __init__(self, database_version: int, code_version: int) -> None:
        super().__init__(database_version, code_version, "run `vessel migrate` first")


class MigrationRefused(RuntimeEngineError):
    """A migration's precondition does not hold; nothing of it was applied."""

    def __init__(self, version: int, name: str, reason: str, run_ids: Sequence[UUID] = ()) -> None:
        shown = ", ".join(str(r) for r in run_ids)
        suffix = f" (for example {shown})" if shown else ""
        super().__init__(f"migration {version:04d}_{name} refused: {reason}{suffix}")
        self.version = version
        self.name = name
        self.run_ids = tuple(run_ids)


class InvalidMigrations(RuntimeEngineError):
    """The migration files shipped with the code are malformed."""
