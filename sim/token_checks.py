"""The live token deltas of a `chatty` Run (seed 000 "Events, settlement, and waits").

Token deltas are live-only: no Step row records them, so no ledger read can
tell a hop that streamed its tokens from one that skipped the loop and
still reported `spoken` = N (a graph-group mutant survived exactly so, M9).
The Run's channel in the process that ran the hop is the tap: its replay
buffer holds the newest events, tokens among them, and the checker reads it
(never a method, no await) as the hop's DONE settlement commits. The
terminal event is published only after that, and the channel is still open,
so the buffer then ends with the settling hop's own events.

- `chatty_tokens_spell_result`: the token events held end in t(N-1) and,
  walking back, count down without a gap to t0, or to the oldest event the
  replay window still holds when it has rolled past the first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.events.model import EventKind
from runtime.models import Run, RunStatus

if TYPE_CHECKING:
    from sim.checker import Checker
    from sim.world import Boot

PATTERN = "chatty"

INVARIANTS = (
    ("chatty_tokens_spell_result", "a chatty Run settled DONE with `spoken` = N has shown "
     "its live readers the token deltas t0 .. t(N-1) in order: the tokens its channel "
     "holds as truth commits end in t(N-1) and count down without a gap to t0, or to "
     "the oldest event the replay window still holds",
     "seed 000 'Events, settlement, and waits' (token deltas are live-only events on the "
     "Run's channel, shown to readers and never persisted)"),
)


def on_settled(checker: Checker, boot: Boot, run: object) -> None:
    """Boot `boot`'s settle_run committed and answered `run` (before any await)."""
    if not isinstance(run, Run) or run.status is not RunStatus.DONE \
            or run.pattern != PATTERN or not boot.alive:
        return
    spoken = (run.result or {}).get("spoken")
    if not isinstance(spoken, int) or spoken <= 0:
        return
    channel = boot.vessel.worker.bus.get(run.id)
    if channel is None or channel._closed:
        return  # no tap left in this process (its channel was closed by another path)
    texts = [e.data.get("text") for e in channel._replay if e.kind == EventKind.TOKEN]
    rolled = bool(channel._replay) and channel._replay[0].cursor > 1
    want = spoken - 1
    for text in reversed(texts):
        if text != f"t{want}":
            break
        if want == 0:
            return
        want -= 1
    else:
        if rolled:
            return  # the window rolled past the earlier tokens; every held one is in order
    shown = texts[-3:]
    checker.fail("chatty_tokens_spell_result", f"chatty Run {run.id} settled DONE with "
                 f"spoken={spoken} in boot {boot.number}, but its channel's tokens end "
                 f"{shown} ({len(texts)} held): t{want} is missing where the countdown "
                 "from the last token stops", run=str(run.id), boot=boot.number)
