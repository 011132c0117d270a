"""sim.faults.proxies._run_of: the Run a ledger call names in the trace.

Its per-type shortcut (`_held_attrs`) must name the same Run as plain `getattr`
over run_id, then id, for every kind of first argument a ledger call takes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from runtime.models import Run, RunDelivery
from sim.faults.proxies import _held_attrs, _run_of

RID = UUID(int=7)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _plain(args: tuple[Any, ...]) -> str | None:
    if not args:
        return None
    first = args[0]
    if isinstance(first, UUID):
        return str(first)
    for attr in ("run_id", "id"):
        value = getattr(first, attr, None)
        if isinstance(value, UUID):
            return str(value)
    return None


class Extra(BaseModel):
    model_config = ConfigDict(extra="allow")


class Prop(BaseModel):
    other: int = 0

    @property
    def run_id(self) -> UUID:
        return RID


class Loose:
    def __init__(self) -> None:
        self.id = RID


def test_run_of_names_what_getattr_names() -> None:
    run = Run.model_construct(id=RID, created_at=NOW, updated_at=NOW)
    delivery = RunDelivery.model_construct(run_id=RID, seq=0, created_at=NOW)
    cases: list[tuple[Any, ...]] = [
        (), (RID, 1), (run,), (delivery,), (Extra(run_id=RID),), (Extra(id=RID),),
        (Extra(),), (Prop(),), (Loose(),), ("text",), (3,), (None,),
    ]
    for args in cases:
        assert _run_of(args) == _plain(args), args
    assert _run_of((run,)) == _run_of((delivery,)) == str(RID)
    assert _held_attrs(Run) == ("id",) and _held_attrs(RunDelivery) == ("run_id",)
    assert _held_attrs(Extra) == ("run_id", "id") and "run_id" in _held_attrs(Prop)
