"""The simulation trace: canonical JSON lines and their SHA-256 hash.

A line is `{"t": virtual seconds, "boot": n, "actor": ..., "event": ..., "data": {...}}`
with sorted keys and no whitespace, so the same seed yields byte-identical
lines in any process on any machine.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import json
import json.encoder
import re
from collections.abc import Callable, Iterable, Iterator
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


def _line_encoder() -> Callable[[object], str]:
    """`_ENCODER.encode`, without what it rebuilds on every call.

    JSONEncoder.iterencode makes a fresh C encoder (and a float formatter the C
    encoder does not use) for each line, about a third of a short line's cost.
    This keeps one C encoder built with `_ENCODER`'s very options, so each line is
    the same bytes; only a circular record would fail differently (RecursionError,
    not ValueError: no markers), and no trace record holds itself. Falls back to
    `_ENCODER.encode` where the C accelerator is missing."""
    make = getattr(json.encoder, "c_make_encoder", None)  # typeshed omits it
    if make is None:
        return _ENCODER.encode
    encode = make(None, _default, json.encoder.encode_basestring_ascii, None,
                  _ENCODER.key_separator, _ENCODER.item_separator, True, False, True)
    join = "".join

    def line(record: object) -> str:
        return join(encode(record, 0))

    return line


_encode = _line_encoder()

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
"""A repr of a live object (a trio task inside a Cancelled, say, which a runtime error
string may carry) names its memory address, which differs from process to process."""


def _scrubbed(line: str) -> str:
    """The line with every object address replaced by one fixed token, so the same seed
    stays byte-identical across processes even when an error string holds a repr."""
    return _ADDRESS.sub(" at 0x?", line) if " at 0x" in line else line


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _scalars(data: dict[str, Any]) -> bool:
    """Whether every value is a JSON scalar of its exact type: then the record itself
    equals its line parsed back (no UUID, enum, tuple or nested object to convert),
    and nothing the caller still holds can change it later."""
    return all(type(v) in _PLAIN for v in data.values())


@dataclass
class Trace:
    lines: list[str] = field(default_factory=list)
    """Append-only, through `emit`."""
    boot: int = 0
    last_t: float = 0.0
    _by_event: dict[str, list[int]] = field(default_factory=dict, repr=False, compare=False)
    """Per event name: the indexes of its lines, in order."""
    _indexed: int = field(default=0, repr=False, compare=False)
    _parsed: dict[int, dict[str, Any]] = field(default_factory=dict, repr=False, compare=False)
    _plain: dict[int, tuple[str, int, dict[str, Any], str, float]] = field(
        default_factory=dict, repr=False, compare=False)
    """Lines of JSON scalars only, kept as emitted: their record is rebuilt on reading
    (keys sorted, as in the line) instead of parsed, which costs several times more."""

    def emit(self, actor: str, event: str, **data: Any) -> None:
        self.last_t = round(trio.current_time(), 6)  # the simulator runs on trio
        record = {
            "t": self.last_t,
            "boot": self.boot,
            "actor": actor,
            "event": event,
            "data": data,
        }
        line = _encode(record)
        if self._indexed == len(self.lines):
            self._by_event.setdefault(event, []).append(self._indexed)
            if type(actor) is str and type(event) is str and _scalars(data) \
                    and " at 0x" not in line:
                self._plain[self._indexed] = (actor, self.boot, data, event, self.last_t)
            self._indexed += 1
        self.lines.append(_scrubbed(line))

    def records(self, *events: str) -> Iterator[dict[str, Any]]:
        """Each line parsed, in order; with `events`, only the lines of those events.
        Callers must not mutate them."""
        for _, record in self.indexed(*events):
            yield record

    def indexed(self, *events: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(line index, parsed line) of every line, or of the lines of `events`.

        `emit` notes each line's index under its event, so the final checks (each
        reads one or two events) never scan the whole trace; a line is parsed once
        and kept, for they read the same lines several times."""
        if self._indexed != len(self.lines):
            self._reindex()  # lines appended behind emit's back: index them afresh
        if events:
            found = (self._by_event.get(e, []) for e in events)
            chosen: Iterable[int] = heapq.merge(*found) if len(events) > 1 else next(found)
        else:
            chosen = range(len(self.lines))
        parsed = self._parsed
        for index in list(chosen):
            record = parsed.get(index)
            if record is None:
                plain = self._plain.pop(index, None)
                if plain is None:
                    record = json.loads(self.lines[index])
                else:
                    actor, boot, data, event, t = plain
                    record = {"actor": actor, "boot": boot, "data": dict(sorted(data.items())),
                              "event": event, "t": t}
                parsed[index] = record
            yield index, record

    def event_lines(self, event: str, before: int | None = None) -> list[str]:
        """The lines of `event`, as emitted, in order; with `before`, only those whose
        index is below it. Read from emit's index: no scan of the whole trace."""
        if self._indexed != len(self.lines):
            self._reindex()
        found = self._by_event.get(event, [])
        if before is not None:
            found = found[:bisect.bisect_left(found, before)]
        return [self.lines[index] for index in found]

    def _reindex(self) -> None:
        self._by_event, self._parsed, self._plain = {}, {}, {}
        for index, line in enumerate(self.lines):
            record = self._parsed[index] = json.loads(line)
            self._by_event.setdefault(record["event"], []).append(index)
        self._indexed = len(self.lines)

    def digest(self) -> str:
        h = hashlib.sha256()
        for line in self.lines:
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)
