"""sim.trace's cached line encoder writes exactly what `_ENCODER.encode` writes
(the trace's byte-identity per seed rests on it)."""

from __future__ import annotations

import enum
import math
import uuid
from datetime import UTC, datetime

from sim.trace import _ENCODER, _encode


class _Colour(enum.Enum):
    RED = "red"


RECORDS: list[dict[str, object]] = [
    {"t": 0.0, "boot": 0, "actor": "a", "event": "e", "data": {}},
    {"t": 12.345678, "boot": 2, "actor": "ledger", "event": "tx.claim_delivery",
     "data": {"run_id": str(uuid.UUID(int=7)), "changed": True}},
    {"t": 1e-7, "boot": 1, "actor": "ü\n\"", "event": "x",
     "data": {"z": [1, 2.5, None, "é", (3, 4)], "a": {"b": math.inf, "a": -math.inf},
              "nan": math.nan, "id": uuid.UUID(int=9), "when": datetime(2026, 1, 1, tzinfo=UTC),
              "colour": _Colour.RED, "big": 10**30, "neg": -0.0, "obj": object.__name__}},
]


def test_the_cached_encoder_writes_the_same_lines() -> None:
    for record in RECORDS:
        assert _encode(record) == _ENCODER.encode(record)
        assert _encode(record) == _encode(record)  # nothing kept between lines
