"""Generic mapping between frozen pydantic records and table rows.

Used by the leased-job and service-attempt stores, whose tables mirror
their models field for field: enums are stored as their values, nested
models, dicts and lists as JSONB, timestamps as timestamptz (naive ones are
refused before writing, and every timestamp read back is aware UTC, so a
round trip returns a model equal to the one written).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from psycopg import sql
from psycopg.types.json import Jsonb
from pydantic import BaseModel

from runtime.adapters.postgres.rows import aware

M = TypeVar("M", bound=BaseModel)


def to_params(
    record: BaseModel, columns: tuple[str, ...], renames: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`{column: value}` for `columns`; `renames` maps column -> field name."""
    renames = renames or {}
    params: dict[str, Any] = {}
    for column in columns:
        value = getattr(record, renames.get(column, column))
        params[column] = _param(value)
    return params


def _param(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return aware(value)
    if isinstance(value, BaseModel):
        return Jsonb(value.model_dump(mode="json"))
    if isinstance(value, dict | list | tuple):
        return Jsonb(_jsonable(value))
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def from_row(
    model: type[M],
    row: Mapping[str, Any],
    columns: tuple[str, ...],
    renames: Mapping[str, str] | None = None,
) -> M:
    renames = renames or {}
    fields: dict[str, Any] = {}
    for column in columns:
        value = row[column]
        if isinstance(value, datetime):
            value = value.astimezone(UTC)
        fields[renames.get(column, column)] = value
    return model.model_validate(fields)


def column_list(columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(c) for c in columns)


def placeholders(columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Placeholder(c) for c in columns)


def assignments(columns: tuple[str, ...]) -> sql.Composed:
    return sql.SQL(", ").join(
        sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder(c)) for c in columns
    )
