"""Mapping between ledger models and table rows.

Run, RunDelivery and Step fields are stored as columns; the Intent, a Run's
result and a Step's data as JSONB. Timestamps are stored as timestamptz and
read back as aware UTC, so a round trip returns a model equal to the one
written (what the memory ledger would return). Naive timestamps are refused:
the Clock seam promises aware UTC, and a naive value could not round-trip.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from psycopg.types.json import Jsonb

from runtime.models import AgentJob, CheckpointRecord, Consent, Intent, Run, RunDelivery, Step

RUN_COLUMNS = (
    "id",
    "pattern",
    "pattern_version",
    "queue",
    "priority",
    "status",
    "seq",
    "session",
    "idempotency_scope",
    "idempotency_key",
    "fingerprint",
    "intent",
    "created_at",
    "updated_at",
    "started_at",
    "result",
    "error",
    "consent_id",
    "agent_job_id",
    "service_attempt_id",
)

DELIVERY_COLUMNS = (
    "run_id",
    "seq",
    "state",
    "mode",
    "queue",
    "priority",
    "held_by",
    "claimed_boot",
    "claim_token",
    "created_at",
    "updated_at",
)

STEP_COLUMNS = ("run_id", "idx", "seq", "kind", "data", "created_at")

Row = dict[str, Any]


def select_list(columns: tuple[str, ...], alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + c for c in columns)


def aware(value: datetime) -> datetime:
    """Reject a naive timestamp before it is written."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"ledger timestamps must be timezone-aware, got naive {value!r}")
    return value


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _json(value: dict[str, Any] | None) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def run_params(run: Run) -> Row:
    return {
        "id": run.id,
        "pattern": run.pattern,
        "pattern_version": run.pattern_version,
        "queue": run.queue,
        "priority": run.priority,
        "status": run.status.value,
        "seq": run.seq,
        "session": run.session,
        "idempotency_scope": run.idempotency_scope,
        "idempotency_key": run.idempotency_key,
        "fingerprint": run.fingerprint,
        "intent": Jsonb(run.intent.model_dump(mode="json")),
        "created_at": aware(run.created_at),
        "updated_at": aware(run.updated_at),
        "started_at": None if run.started_at is None else aware(run.started_at),
        "result": _json(run.result),
        "error": run.error,
        "consent_id": run.consent_id,
        "agent_job_id": run.agent_job_id,
        "service_attempt_id": run.service_attempt_id,
    }


def delivery_params(d: RunDelivery) -> Row:
    return {
        "run_id": d.run_id,
        "seq": d.seq,
        "state": d.state.value,
        "mode": d.mode.value,
        "queue": d.queue,
        "priority": d.priority,
        "held_by": d.held_by,
        "claimed_boot": d.claimed_boot,
        "claim_token": d.claim_token,
        "created_at": aware(d.created_at),
        "updated_at": aware(d.updated_at),
    }


def run_from_row(row: Row) -> Run:
    fields = {c: row[c] for c in RUN_COLUMNS}
    fields["intent"] = Intent.model_validate(row["intent"])
    for name in ("created_at", "updated_at", "started_at"):
        fields[name] = _utc(row[name])
    return Run.model_validate(fields)


def delivery_from_row(row: Row) -> RunDelivery:
    fields = {c: row[c] for c in DELIVERY_COLUMNS}
    fields["created_at"] = _utc(row["created_at"])
    fields["updated_at"] = _utc(row["updated_at"])
    return RunDelivery.model_validate(fields)


def step_from_row(row: Row) -> Step:
    return Step(
        run_id=row["run_id"],
        index=row["idx"],
        seq=row["seq"],
        kind=row["kind"],
        data=row["data"],
        created_at=row["created_at"].astimezone(UTC),
    )


# -- durable waits -------------------------------------------------------------

CHECKPOINT_COLUMNS = (
    "run_id", "seq", "document", "consent_id", "agent_job_id", "service_attempt_id", "updated_at",
)

CONSENT_COLUMNS = (
    "id",
    "run_id",
    "seq",
    "node",
    "prompt",
    "owner",
    "status",
    "decided_by",
    "decided_at",
    "created_at",
)

JOB_COLUMNS = (
    "id",
    "run_id",
    "seq",
    "node",
    "request",
    "status",
    "result",
    "created_at",
    "updated_at",
)


def checkpoint_params(record: CheckpointRecord) -> Row:
    return {
        "run_id": record.run_id,
        "seq": record.seq,
        "document": Jsonb(record.document),
        "consent_id": record.consent_id,
        "agent_job_id": record.agent_job_id,
        "service_attempt_id": record.service_attempt_id,
        "updated_at": aware(record.updated_at),
    }


def consent_params(consent: Consent) -> Row:
    return {
        "id": consent.id,
        "run_id": consent.run_id,
        "seq": consent.seq,
        "node": consent.node,
        "prompt": consent.prompt,
        "owner": consent.owner,
        "status": consent.status.value,
        "decided_by": consent.decided_by,
        "decided_at": None if consent.decided_at is None else aware(consent.decided_at),
        "created_at": aware(consent.created_at),
    }


def job_params(job: AgentJob) -> Row:
    return {
        "id": job.id,
        "run_id": job.run_id,
        "seq": job.seq,
        "node": job.node,
        "request": Jsonb(job.request),
        "status": job.status.value,
        "result": _json(job.result),
        "created_at": aware(job.created_at),
        "updated_at": aware(job.updated_at),
    }


def checkpoint_from_row(row: Row) -> CheckpointRecord:
    fields = {c: row[c] for c in CHECKPOINT_COLUMNS}
    fields["updated_at"] = _utc(row["updated_at"])
    return CheckpointRecord.model_validate(fields)


def consent_from_row(row: Row) -> Consent:
    fields = {c: row[c] for c in CONSENT_COLUMNS}
    fields["decided_at"] = _utc(row["decided_at"])
    fields["created_at"] = _utc(row["created_at"])
    return Consent.model_validate(fields)


def job_from_row(row: Row) -> AgentJob:
    fields = {c: row[c] for c in JOB_COLUMNS}
    fields["created_at"] = _utc(row["created_at"])
    fields["updated_at"] = _utc(row["updated_at"])
    return AgentJob.model_validate(fields)
