"""Fresh identity values on every memory-ledger and job-store read (issue M9).

The PostgreSQL ledger decodes a new object for every column of every row it
reads, so two reads of one boot id, claim token, Run id or generation number
are equal but never the same object. The memory ledger keeps its records in
dicts; handing those records back as they are would make an identity test
(`is`) of two ids pass in the simulator and fail on PostgreSQL (the orphan
test `delivery.claimed_boot is deps.boot_id` survived every seed that way).
So each record a read hands back is a shallow copy whose identity fields
(ids, keys, tokens, owners and generation numbers) are new objects: equal
values, new identities, the rest of the record shared (records are frozen, and
a deep copy of every record made a campaign quadratic once).

CPython shares a few values by construction (strings of fewer than two
characters, ints from -5 to 256); PostgreSQL's decoder returns those same
shared objects, so they stay shared here too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar
from uuid import UUID

from pydantic import BaseModel

from runtime.jobs.models import AttemptEvent, EvidenceRecord, Interpretation, LeasedJob
from runtime.models import (
    Admission,
    AgentJob,
    CheckpointRecord,
    Claim,
    Consent,
    Run,
    RunDelivery,
    Step,
)

ID_FIELDS: dict[type[BaseModel], tuple[str, ...]] = {
    Run: ("id", "seq", "session", "idempotency_scope", "idempotency_key", "consent_id",
          "agent_job_id", "service_attempt_id"),
    RunDelivery: ("run_id", "seq", "held_by", "claimed_boot", "claim_token"),
    Step: ("run_id", "index", "seq"),
    Consent: ("id", "run_id", "seq", "owner", "decided_by"),
    AgentJob: ("id", "run_id", "seq"),
    CheckpointRecord: ("run_id", "seq", "consent_id", "agent_job_id", "service_attempt_id"),
    LeasedJob: ("id", "workspace", "evidence_id", "fence", "lease_owner", "settled_fence"),
    EvidenceRecord: ("id", "workspace"),
    Interpretation: ("job_id", "number", "fence"),
    AttemptEvent: ("job_id", "index", "fence", "worker"),
}
"""Per record type, the fields that name something (absent fields are skipped)."""

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)


def fresh_id(value: Any) -> Any:
    """An equal value that is a new object wherever CPython makes one for a decoder."""
    if isinstance(value, str):
        return value[:1] + value[1:] if len(value) > 1 else value
    if isinstance(value, UUID):
        copied = object.__new__(UUID)  # UUID(int=...) re-validates: 3x the cost
        object.__setattr__(copied, "int", value.int)
        object.__setattr__(copied, "is_safe", value.is_safe)
        return copied
    if isinstance(value, int) and not isinstance(value, bool):
        return value + 0  # a new int past CPython's small-int cache, as a decoder makes
    return value


def fresh_record(record: R) -> R:
    """A shallow copy of `record` with new identity objects for its id fields."""
    names = ID_FIELDS.get(type(record))
    if names is None:
        return record
    state = dict(record.__dict__)
    for name in names:
        if name in state:
            state[name] = fresh_id(state[name])
    return _rebuilt(record, state)


def _rebuilt(record: R, state: dict[str, Any]) -> R:
    """`record`'s type with `state` as its fields, unvalidated (what `__copy__` does,
    without its generic private and extra handling: records have neither)."""
    copied = object.__new__(type(record))
    object.__setattr__(copied, "__dict__", state)
    object.__setattr__(copied, "__pydantic_fields_set__", set(record.__pydantic_fields_set__))
    object.__setattr__(copied, "__pydantic_extra__", record.__pydantic_extra__)
    object.__setattr__(copied, "__pydantic_private__", record.__pydantic_private__)
    return copied


def _with(record: R, **changes: Any) -> R:
    """A shallow copy with `changes`, its set fields as they were (no validation)."""
    return _rebuilt(record, {**record.__dict__, **changes})


def fresh_value(value: T) -> T:
    """`value` as a read hands it back: its records (alone, in a list, or inside an
    Admission or Claim) fresh copies; anything else as it is."""
    if isinstance(value, Admission):
        admission: Any = _with(
            value, run=fresh_record(value.run), delivery=fresh_record(value.delivery),
            busy=None if value.busy is None else fresh_record(value.busy))
        return admission  # type: ignore[no-any-return]
    if isinstance(value, Claim):
        claim: Any = _with(
            value, run=None if value.run is None else fresh_record(value.run),
            delivery=None if value.delivery is None else fresh_record(value.delivery))
        return claim  # type: ignore[no-any-return]
    if isinstance(value, BaseModel):
        return fresh_record(value)
    if isinstance(value, list):
        return [fresh_value(v) for v in value]  # type: ignore[return-value]
    return value


def hands_back_fresh(
    method: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Decorate a memory-ledger transaction: what it returns is `fresh_value`d."""

    @functools.wraps(method)
    async def read(*args: P.args, **kwargs: P.kwargs) -> T:
        return fresh_value(await method(*args, **kwargs))

    return read
