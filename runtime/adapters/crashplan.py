"""Crash plans for the real process: `VESSEL_CRASH_AT=<point>[:<nth>]`.

DESIGN section 5 ("the real-process lifecycle crashes at the same names")
and section 7 (boot 1 kills itself with SIGKILL at the window). The seed's
recovery rules (seed 000_81a5c720b14d934a.txt, "Cancellation, mutation, and
recovery": uncheckpointed process death is failed, never guessed forward)
can only be proved against a process that really died at the window, so
this FaultPoints implementation does exactly that.

Guarantees:
- The plan names one point of `runtime.faults.CATALOGUE` and a hit count
  `nth >= 1` (default 1). Anything else is refused by `parse` with
  `CrashPlanInvalid`, whose message is one line naming the problem; the CLI
  turns it into exit status 2 before anything starts.
- Hits of the named point are counted in this process; hits of every other
  point are ignored. At exactly the nth hit the process sends itself
  SIGKILL: no `finally`, no `atexit`, no buffered log or stream is flushed,
  no transaction is committed after that instant. One diagnostic line is
  written first with a raw `os.write` to stderr (no Python buffer involved)
  so a harness can see which window fired.
- Without the variable there is no plan (`from_env` returns None) and the
  process runs with the no-op `NoFaults`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from runtime.faults import CATALOGUE

ENV = "VESSEL_CRASH_AT"


class CrashPlanInvalid(ValueError):
    """The crash plan in the environment names no catalogued point or a bad count."""


def _sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class CrashPlan:
    """SIGKILL this process at the `nth` hit of fault point `at`."""

    at: str
    nth: int = 1
    kill: Callable[[], None] = field(default=_sigkill_self, repr=False)
    hits: int = 0

    def __post_init__(self) -> None:
        if self.at not in CATALOGUE:
            known = ", ".join(sorted(CATALOGUE))
            raise CrashPlanInvalid(
                f"{ENV}: unknown fault point {self.at!r} (known points: {known})"
            )
        if self.nth < 1:
            raise CrashPlanInvalid(f"{ENV}: hit count must be 1 or more, got {self.nth}")

    @classmethod
    def parse(cls, text: str, kill: Callable[[], None] | None = None) -> CrashPlan:
        """`<point>` or `<point>:<nth>`; raises CrashPlanInvalid naming the problem."""
        raw = text.strip()
        name, sep, count = raw.partition(":")
        nth = 1
        if sep:
            try:
                nth = int(count)
            except ValueError:
                raise CrashPlanInvalid(
                    f"{ENV}: hit count {count!r} of {raw!r} is not an integer"
                ) from None
        if kill is None:
            return cls(name, nth)
        return cls(name, nth, kill=kill)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CrashPlan | None:
        """The plan in `VESSEL_CRASH_AT`, or None when it is unset or empty."""
        value = (os.environ if environ is None else environ).get(ENV, "")
        return cls.parse(value) if value.strip() else None

    def describe(self) -> str:
        return f"{self.at}:{self.nth}"

    async def point(self, name: str, **context: Any) -> None:
        if name != self.at:
            return
        self.hits += 1
        if self.hits != self.nth:
            return
        detail = " ".join(f"{k}={v}" for k, v in sorted(context.items()))
        line = f"vessel: crash plan {self.describe()}: SIGKILL pid {os.getpid()} {detail}\n"
        with suppress(OSError):  # stderr closed: the kill matters, not the note
            os.write(2, line.encode("utf-8", "replace"))
        self.kill()
