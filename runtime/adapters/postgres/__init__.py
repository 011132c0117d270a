"""The PostgreSQL adapter: the production ledger and its schema migrations."""

from runtime.adapters.postgres.catalog import latest_version
from runtime.adapters.postgres.errors import (
    ConnectFailed,
    MigrationRefused,
    SchemaTooNew,
    SchemaTooOld,
    SchemaVersionError,
)
from runtime.adapters.postgres.ledger import PostgresLedger
from runtime.adapters.postgres.migrate import MigrationReport, migrate

__all__ = [
    "ConnectFailed",
    "MigrationRefused",
    "MigrationReport",
    "PostgresLedger",
    "SchemaTooNew",
    "SchemaTooOld",
    "SchemaVersionError",
    "latest_version",
    "migrate",
]
