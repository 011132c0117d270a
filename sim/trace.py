"""The simulation trace: canonical JSON lines and their SHA-256 hash.

A line is `{"t": virtual seconds, "boot": n, "actor": ..., "event": ..., "data": {...}}`
with sorted keys and no whitespace, so the same seed yields byte-identical
lines in any process on any machine.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import trio


def _default(value: object) -> object:
    if isinstance(value, UUID):
        return str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "value"):
        return value.value  # enums
    return str(value)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=_default)
"""One encoder for every line: json.dumps with options builds a new one per call."""


@dataclass
class Trace:
    lines: list[str] = field(default_factory=list)
    boot: int = 0
    last_t: float = 0.0
    _parsed: dict[int, tuple[str, dict[str, Any]]] = field(
        default_factory=dict, repr=False, compare=False)

    def emit(self, actor: str, event: str, **data: Any) -> None:
        self.last_t = round(trio.current_time(), 6)  # the simulator runs on trio
        record = {
            "t": self.last_t,
            "boot": self.boot,
            "actor": actor,
            "event": event,
            "data": data,
        }
        self.lines.append(_ENCODER.encode(record))

    def records(self, *events: str) -> Iterator[dict[str, Any]]:
        """Each line parsed, in order; with `events`, only the lines of those events.
        Callers must not mutate them."""
        for _, record in self.indexed(*events):
            yield record

    def indexed(self, *events: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line index, parsed line) of every line, or of the lines of `events`.

        A line is parsed once and kept (the final checks read the trace several
        times), and with `events` only lines that contain `"event":"<name>"` are
        parsed at all: canonical JSON escapes every quote inside a string, so that
        text is the line's own event key or a nested one, and the parsed record
        decides which."""
        cache = self._parsed
        marks = tuple(_ENCODER.encode({"event": e})[1:-1] for e in events)
        for index, line in enumerate(self.lines):
            if marks and not any(mark in line for mark in marks):
                continue
            hit = cache.get(index)
            if hit is None or hit[0] is not line:  # new, or the lines were replaced
                hit = cache[index] = (line, json.loads(line))
            if not events or hit[1]["event"] in events:
                yield index, hit[1]

    def digest(self) -> str:
        h = hashlib.sha256()
        for line in self.lines:
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)
