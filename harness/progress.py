"""Progress of campaigns and the gate, readable in a terminal and in a CI log.

On a terminal: rich's live bar (transient, on stderr). Anywhere else (a CI
log, a pipe, a file) a live bar prints nothing until the end, so a 20-minute
campaign looked hung; there `Progress` writes one plain line every
`every_s` seconds of wall time instead:

    progress: 1200/3300 simulations (36%), scenario cancel, 0 violations, 4m10s elapsed, ETA 7m18s

and one line when the work is done. `every_s <= 0` turns the lines off.
The wall clock is read here, in the harness, never inside the simulation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

DEFAULT_EVERY_S = 10.0


def duration(seconds: float) -> str:
    """`75` -> `1m15s`; `3725` -> `1h02m05s`."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m:02d}m{sec:02d}s"
    return f"{m}m{sec:02d}s" if m else f"{sec}s"


class Progress:
    """Counts finished simulations; reports them as a bar or as periodic lines.

    `expect(n)` adds `n` simulations to the total (the gate runs several
    campaigns through one reporter); `tick(result)` records one finished
    simulation summary (`sim.campaign.summarize`).
    """

    def __init__(self, console: Console, every_s: float = DEFAULT_EVERY_S,
                 label: str = "campaign", clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.every_s = every_s
        self.label = label
        self.clock = clock
        self.total = 0
        self.done = 0
        self.violations = 0
        self.scenario = ""
        self.started = clock()
        self.last_line = self.started
        self._bar: RichProgress | None = None
        self._task: Any = None

    @property
    def live(self) -> bool:
        """A terminal gets the live bar; anything else gets plain lines."""
        return self.console.is_terminal

    def __enter__(self) -> Progress:
        if self.live:
            self._bar = RichProgress(
                TextColumn(f"[bold]{self.label}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("{task.fields[scenario]}"),
                TextColumn("{task.fields[bad]} violations"),
                console=self.console, transient=True, get_time=self.clock)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total, bad=0, scenario="")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, exc, tb)
            self._bar = None
        elif kind is None and self.done and self.every_s > 0:
            self._emit(final=True)

    def expect(self, n: int) -> None:
        self.total += n
        if self._bar is not None:
            self._bar.update(self._task, total=self.total)

    def tick(self, result: dict[str, Any]) -> None:
        self.done += 1
        self.violations += result.get("verdict") != "ok"
        self.scenario = str(result.get("scenario", ""))
        if self._bar is not None:
            self._bar.update(self._task, advance=1, bad=self.violations, scenario=self.scenario)
        elif (self.every_s > 0 and self.done < self.total
              and self.clock() - self.last_line >= self.every_s):
            self._emit()

    def say(self, text: str) -> None:
        """A phase line (`gate: determinism audit, 20 fresh processes`), off a terminal only."""
        if not self.live and self.every_s > 0:
            self._write(f"{self.label}: {text}")

    def line(self, final: bool = False) -> str:
        now = self.clock()
        elapsed = now - self.started
        share = f" ({100 * self.done // self.total}%)" if self.total else ""
        left = ""
        if not final and self.done and self.total > self.done:
            left = f", ETA {duration(elapsed / self.done * (self.total - self.done))}"
        where = f", scenario {self.scenario}" if self.scenario and not final else ""
        head = "done" if final else "progress"
        return (f"{self.label} {head}: {self.done}/{self.total} simulations{share}{where}, "
                f"{self.violations} violations, {duration(elapsed)} elapsed{left}")

    def _emit(self, final: bool = False) -> None:
        self.last_line = self.clock()
        self._write(self.line(final))

    def _write(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)
        self.console.file.flush()
