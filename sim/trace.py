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
    _parsed: list[dict[str, Any]] = field(default_factory=list, repr=False, compare=False)

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

    def records(self) -> Iterator[dict[str, Any]]:
        """Each line parsed, in order. Lines are parsed once and kept: the final
        checks read the whole trace several times. Callers must not mutate them."""
        parsed = self._parsed
        if len(parsed) > len(self.lines):
            parsed.clear()  # the lines were replaced: parse them again
        for line in self.lines[len(parsed):]:
            parsed.append(json.loads(line))
        yield from parsed[: len(self.lines)]

    def digest(self) -> str:
        h = hashlib.sha256()
        for line in self.lines:
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)
