"""Deadlines for the waits of tests that run in real time (issue 18, M9 item 3).

A test asserts on events and states, never on how fast something went: the
default suite must stay green on a saturated machine, so that a failing test
means a bug. Where a test must wait for a condition (a Run terminal, a job
aborted, a process gone) it waits with one of these deadlines, far beyond any
delay load adds; reaching one means the thing never happened. Where a test
measures time at all, it asserts lower bounds only (an injected delay held
something at least this long), which load cannot break; an upper bound may
only tell "ends" from "hangs", and then it is `HANG_S`.
"""

from __future__ import annotations

HANG_S = 30.0
"""An operation that must end (a deadline, a refused connect, a stop) ends within
this; one that would hang never does. Not a speed claim."""

SETTLE_S = 60.0
"""A state that work reaches by itself (Runs terminal, jobs finished) is reached
within this, however slow the machine."""
