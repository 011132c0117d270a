"""Request and response models of the Vessel's HTTP surface.

The request models are the admission edge: seed 000_81a5c720b14d934a.txt
("Admission and exact claim") makes RunEngine.submit the sole admission path
and requires that bad input writes nothing, so everything the HTTP surface
can refuse is refused here, before any ledger call:

- `RunRequest` is the Intent a caller may state. It forbids unknown fields.
  `sigil` (the principal) comes from the credential, `idempotency_key` from
  the `Idempotency-Key` header and `source` is the surface itself; naming
  them in the body is refused, never silently overridden.
- Strings must not contain NUL characters or lone UTF-16 surrogates (JSON
  lets `"\\ud800"` through; UTF-8 cannot encode it) and numbers in `content`
  must be finite: PostgreSQL text and JSONB cannot store any of them, so
  accepting them would turn a caller's mistake into a server error on the
  durable profile, and the memory profile refuses them the same way.
- Sizes are bounded (`MAX_*`), so one request cannot become an unbounded row.

Every 4xx and 5xx body is an `ErrorBody`: `error` (a stable code), `field`
(what was wrong, when one thing was) and `reason` (why, in words).
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from runtime.models import Consent, ConsentStatus, Run, RunStatus

MAX_NAME = 200
MAX_PROMPT = 100_000
MAX_SCOPES = 64
MAX_CONTENT_BYTES = 256 * 1024
MAX_IDEMPOTENCY_KEY = 200

CREDENTIAL_FIELDS = {
    "sigil": "the principal comes from the bearer credential, not the body",
    "idempotency_key": "the idempotency key comes from the Idempotency-Key header",
    "source": "the source of an HTTP admission is always 'http'",
}


def check_no_nul(value: Any, where: str) -> None:
    """Refuse NUL characters and lone surrogates anywhere in a JSON value
    (keys included), and non-finite numbers: PostgreSQL cannot store them."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{where} must not contain NUL characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"{where} must not contain lone surrogates (not encodable as UTF-8)"
            ) from None
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} must not contain NaN or infinite numbers")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_no_nul(key, where)
            check_no_nul(item, where)
    elif isinstance(value, list | tuple):
        for item in value:
            check_no_nul(item, where)


class ErrorDetail(BaseModel):
    field: str | None = None
    reason: str


class ErrorBody(BaseModel):
    """Every error response: a stable code, the field at fault (if one), and why."""

    error: str = Field(description="stable machine-readable code, e.g. invalid_request")
    field: str | None = Field(default=None, description="the field, header or parameter at fault")
    reason: str = Field(description="what was wrong, in words")
    details: list[ErrorDetail] | None = Field(
        default=None, description="every problem found, when there were several"
    )


class RunRequest(BaseModel):
    """What a caller asks to run (the caller-stated part of an Intent)."""

    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(min_length=1, max_length=MAX_NAME, description="registered Pattern name")
    prompt: str = Field(default="", max_length=MAX_PROMPT)
    scopes: list[str] = Field(default_factory=list, max_length=MAX_SCOPES)
    content: dict[str, Any] = Field(
        default_factory=dict, description="the Pattern's initial state, as JSON"
    )
    session: str | None = Field(
        default=None, min_length=1, max_length=MAX_NAME,
        description="Bridge session: at most one nonterminal Run per session",
    )
    priority: int | None = Field(
        default=None, ge=0, le=100, description="doctrine priority 0-100, higher first"
    )

    @field_validator("pattern", "prompt", "session")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        check_no_nul(value, "text")
        return value

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        for scope in value:
            if not 0 < len(scope) <= MAX_NAME:
                raise ValueError(f"each scope must be 1-{MAX_NAME} characters")
        check_no_nul(value, "scopes")
        return value

    @field_validator("content")
    @classmethod
    def _content(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_no_nul(value, "content")
        size = len(json.dumps(value, separators=(",", ":")).encode())
        if size > MAX_CONTENT_BYTES:
            raise ValueError(f"content is {size} bytes of JSON, at most {MAX_CONTENT_BYTES}")
        return value


class ConsentDecision(BaseModel):
    """A verdict on a consent; the deciding principal comes from the credential."""

    model_config = ConfigDict(extra="forbid")

    approve: StrictBool


class RunView(BaseModel):
    """A Run as the ledger holds it."""

    id: UUID
    pattern: str
    pattern_version: int
    queue: str
    priority: int
    status: RunStatus
    seq: int
    principal: str = Field(description="the admitting principal (the Run's sigil)")
    session: str | None
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    result: dict[str, Any] | None
    error: str | None
    consent_id: UUID | None
    agent_job_id: UUID | None
    service_attempt_id: UUID | None

    @classmethod
    def of(cls, run: Run) -> RunView:
        return cls(
            id=run.id,
            pattern=run.pattern,
            pattern_version=run.pattern_version,
            queue=run.queue,
            priority=run.priority,
            status=run.status,
            seq=run.seq,
            principal=run.intent.sigil,
            session=run.session,
            idempotency_key=run.idempotency_key,
            created_at=run.created_at,
            updated_at=run.updated_at,
            started_at=run.started_at,
            result=run.result,
            error=run.error,
            consent_id=run.consent_id,
            agent_job_id=run.agent_job_id,
            service_attempt_id=run.service_attempt_id,
        )


class ConsentView(BaseModel):
    id: UUID
    run_id: UUID
    node: str
    prompt: str
    owner: str
    status: ConsentStatus
    decided_by: str | None
    decided_at: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, consent: Consent) -> ConsentView:
        return cls.model_validate(consent.model_dump(exclude={"seq"}))


class QueueStatus(BaseModel):
    concurrency: int


class HealthView(BaseModel):
    """Startup state and what serving depends on (seed 000, "Topology and limits")."""

    phase: str = Field(description="starting, reconciling, ready, refused, stopping, stopped")
    ready: bool
    boot_id: str
    profile: str
    strict: bool = Field(description="True when degraded startup reconciliation refuses to serve")
    degraded: list[str] = Field(description="reasons startup reconciliation was degraded")
    queues: dict[str, QueueStatus]
    broker_connected: bool
    relay_restarts: int = Field(description="times the maintenance relay supervisor restarted")
