"""A durable reference provider: a ServiceDriver whose provider side is a table.

For restart receipts and local runs of `vessel serve --services reference`
(seed 000_81a5c720b14d934a.txt, "Service job attempts"): the provider's jobs
live in `reference_provider_job` of the given database, so what it started
survives the Vessel being killed, and a second boot can prove, by lookup,
that a job exists or that none does. It replays the same key (a second
transmission with the same payload returns the first job; another payload
is refused with KeyReuseRejected), its lookups prove absence, and a job
finishes `finish_after_s` after acceptance by the database's clock.
`transmissions` counts every submit that reached it; one row per key is the
effect. The table is the adapter's own, created on connect under an
advisory lock; it is not part of the ledger schema.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from psycopg import sql
from psycopg.rows import DictRow

from runtime.adapters.postgres.connect import DEFAULT_CONNECT_TIMEOUT_S, open_pool
from runtime.adapters.postgres.tx import Transactional, maybe
from runtime.service.driver import (
    KeyReuseRejected,
    ProviderReport,
    ProviderStatus,
    ServiceSubmission,
    SubmitAck,
)

CREATE_LOCK_KEY = 0x7665_7373_656C_0002
SCHEMA = sql.SQL("""
CREATE TABLE IF NOT EXISTS reference_provider_job (
    provider_job_id text        PRIMARY KEY,
    idempotency_key text        NOT NULL UNIQUE,
    request_digest  text        NOT NULL,
    cancelled       boolean     NOT NULL DEFAULT false,
    transmissions   integer     NOT NULL CHECK (transmissions >= 1),
    accepted_at     timestamptz NOT NULL,
    finish_at       timestamptz NOT NULL
)""")
LOCK_CREATE = sql.SQL("SELECT pg_advisory_xact_lock(%(key)s)").format()
RECEIVE = sql.SQL(
    "INSERT INTO reference_provider_job (provider_job_id, idempotency_key, request_digest, "
    "transmissions, accepted_at, finish_at) "
    "VALUES (%(job)s, %(key)s, %(digest)s, 1, now(), now() + %(after)s) "
    "ON CONFLICT (idempotency_key) DO UPDATE SET transmissions = "
    "reference_provider_job.transmissions + 1 "
    "RETURNING provider_job_id, request_digest"
).format()
LOOKUP = sql.SQL(
    "SELECT provider_job_id, idempotency_key, request_digest, cancelled, "
    "now() >= finish_at AS finished, extract(epoch FROM finish_at - accepted_at) AS seconds "
    "FROM reference_provider_job WHERE idempotency_key = %(key)s"
).format()
CANCEL = sql.SQL(
    "UPDATE reference_provider_job SET cancelled = true "
    "WHERE idempotency_key = %(key)s AND now() < finish_at"
).format()
TRANSMISSIONS = sql.SQL(
    "SELECT coalesce(sum(transmissions), 0) AS n, count(*) AS jobs FROM reference_provider_job"
).format()


def _job_id(key: str) -> str:
    return f"ref:{key}"


class PostgresReferenceProvider(Transactional):
    """Build it with `await PostgresReferenceProvider.connect(dsn)`; close it when done."""

    lookup_proves_absence = True
    replays_same_key = True
    finish_after_s: float = 2.0

    @classmethod
    async def connect(
        cls, dsn: str, *, finish_after_s: float = 2.0,
        timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> PostgresReferenceProvider:
        pool = await open_pool(dsn, min_size=1, max_size=2, timeout_s=timeout_s)
        provider = cls(pool)
        provider.finish_after_s = finish_after_s
        async with provider._transaction() as cur:
            await cur.execute(LOCK_CREATE, {"key": CREATE_LOCK_KEY})
            await cur.execute(SCHEMA)
        return provider

    async def submit(self, submission: ServiceSubmission) -> SubmitAck:
        params = {"job": _job_id(submission.idempotency_key), "key": submission.idempotency_key,
                  "digest": submission.request_digest,
                  "after": timedelta(seconds=self.finish_after_s)}
        async with self._transaction() as cur:
            row = await maybe(cur, RECEIVE, params)
            assert row is not None
            if row["request_digest"] != submission.request_digest:
                raise KeyReuseRejected("the key is bound to another payload")
        return SubmitAck(provider_job_id=str(row["provider_job_id"]))

    async def lookup(
        self, *, idempotency_key: str, provider_job_id: str | None
    ) -> ProviderReport | None:
        async with self._transaction() as cur:
            row = await maybe(cur, LOOKUP, {"key": idempotency_key})
        if row is None or (provider_job_id is not None and row["provider_job_id"]
                           != provider_job_id):
            return None
        return _report(row)

    async def cancel(self, *, idempotency_key: str, provider_job_id: str | None) -> bool:
        async with self._transaction() as cur:
            await cur.execute(CANCEL, {"key": idempotency_key})
        return True  # an unfinished job is cancelled; a finished or absent one runs nothing

    async def effects(self) -> dict[str, int]:
        """Jobs started (effects) and transmissions received, over all keys."""
        async with self._transaction() as cur:
            row = await maybe(cur, TRANSMISSIONS, {})
        assert row is not None
        return {"jobs": int(row["jobs"]), "transmissions": int(row["n"])}


def _report(row: DictRow) -> ProviderReport:
    job_id = str(row["provider_job_id"])
    status = ProviderStatus.RUNNING
    result: dict[str, Any] | None = None
    usage: dict[str, float] | None = None
    if row["cancelled"]:
        status = ProviderStatus.CANCELLED
    elif row["finished"]:
        status, result = ProviderStatus.SUCCEEDED, {"artifact": f"{job_id}.out"}
        usage = {"seconds": float(row["seconds"])}
    return ProviderReport(
        provider_job_id=job_id, idempotency_key=str(row["idempotency_key"]),
        request_digest=str(row["request_digest"]), status=status,
        progress_cursor=f"{job_id}@running", result=result, usage=usage,
    )
