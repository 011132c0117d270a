"""Trace keeps the records of plain lines as it emits them, instead of parsing the
line back in the final checks: the kept record must be exactly what parsing gives
(same values, same key order), and lines that need converting are still parsed."""

from __future__ import annotations

import enum
import json
import uuid

import trio

from sim.kernel import run_simulation
from sim.trace import Trace


class Color(enum.StrEnum):
    RED = "red"


def _same_as_parsed(trace: Trace) -> None:
    for index, record in trace.indexed():
        parsed = json.loads(trace.lines[index])
        assert record == parsed
        assert list(record) == list(parsed)
        assert list(record["data"]) == list(parsed["data"])


def test_kept_records_equal_the_parsed_lines() -> None:
    class Live:
        def __repr__(self) -> str:
            return f"<Live at {hex(id(self))}>"

    async def main() -> Trace:
        trace = Trace()
        trace.emit("a", "plain", z=1, a="x", m=2.5, n=None, b=True)
        trace.emit("a", "uuid", run=uuid.UUID(int=7))
        trace.emit("a", "enum", color=Color.RED)
        trace.emit("a", "nested", items=[1, 2], more={"k": (1, 2)})
        trace.emit("a", "repr", error=f"lost {Live()!r}")
        await trio.sleep(1.25)
        trace.boot = 2
        trace.emit("b", "late", cursor=3)
        trace.emit("b", "empty")
        return trace

    trace = trio.run(main)
    # kept as emitted: plain, late, empty; converted or scrubbed lines are parsed
    assert sorted(trace._plain) == [0, 5, 6]
    _same_as_parsed(trace)


def test_a_simulation_reads_the_same_records_either_way() -> None:
    result = run_simulation(3, "events", "swarm")
    assert result.world is not None
    trace = result.world.trace
    assert len(trace._plain) + len(trace._parsed) > len(trace.lines) // 2
    _same_as_parsed(trace)


def test_event_lines_are_the_lines_of_that_event_before_an_index() -> None:
    """event_lines reads emit's index: the lines a scan for the event finds, before
    any index, also after lines were appended behind emit's back."""

    async def main() -> Trace:
        trace = Trace()
        for i in range(30):
            trace.emit("ledger", "tx.admit_run" if i % 3 == 0 else "tx.other", i=i)
        return trace

    trace = trio.run(main)
    trace.lines.append(json.dumps({"actor": "x", "boot": 0, "data": {}, "event": "tx.admit_run",
                                   "t": 0.0}, sort_keys=True, separators=(",", ":")))
    for before in (None, 0, 1, 2, 13, 29, 30, 31):
        scan = [line for index, line in enumerate(trace.lines)
                if json.loads(line)["event"] == "tx.admit_run"
                and (before is None or index < before)]
        assert trace.event_lines("tx.admit_run", before) == scan
    assert trace.event_lines("never") == []
