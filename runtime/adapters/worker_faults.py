"""Faults for a real `vessel jobs work` process (issue 8 item 6).

Seed 004_85033eb8fc772f12.txt asks for real process tests of a restart, a
bounded drain, a hung request, lost acknowledgements and repeated crashes.
A separate worker process can only be put into those windows from outside,
so the CLI accepts two test-only knobs, both inert unless given:

- a model script (`--model-script hang,lost,ok,slow:2`): one entry per
  model call of this process, in order, then the reference behaviour.
  `hang` never answers (the worker's model deadline or a signal ends it);
  `lost` raises `ConnectionResetError` as if the provider's reply was lost
  in transit (the provider may have done and billed the work, so the usage
  is unknown); `slow:S` answers normally after S seconds; `ok` answers at
  once. Unknown entries are refused with `ScriptInvalid`.
- a store crash plan (`VESSEL_JOBS_CRASH_AT=<method>[:<nth>]`): the process
  SIGKILLs itself right after the nth call of that JobStore method
  returned, i.e. after its transaction committed and before the worker
  acted on the answer (a lost acknowledgement of a commit, or a death in
  the middle of a job). A `claim_one` that claimed nothing is not counted.
  One line is written to stderr with a raw `os.write` first, as
  `runtime.adapters.crashplan` does for `vessel serve`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, cast

import anyio

from runtime.adapters.reference_model import ReferenceModelClient, Step
from runtime.jobs.model import ModelReply, ModelRequest
from runtime.jobs.store import JobStore

CRASH_ENV = "VESSEL_JOBS_CRASH_AT"
CRASH_METHODS = (
    "claim_one",
    "renew",
    "reserve_model_call",
    "stage",
    "schedule_retry",
    "fail",
    "exhaust",
)
LOST_REPLY = "the model's reply was lost in transit (scripted)"


class ScriptInvalid(ValueError):
    """A model script or store crash plan that names no known step; one line."""


# -- model scripts ------------------------------------------------------------------


async def _hang(request: ModelRequest) -> ModelReply | None:
    await anyio.sleep_forever()
    return None  # pragma: no cover - never reached


def _slow(seconds: float) -> Callable[[ModelRequest], Any]:
    async def step(request: ModelRequest) -> ModelReply | None:
        await anyio.sleep(seconds)
        return None  # then the reference reply

    return step


async def _ok(request: ModelRequest) -> ModelReply | None:
    return None


def parse_model_script(text: str) -> list[Step]:
    """`hang,lost,slow:2,ok` -> the steps of a ReferenceModelClient script."""
    steps: list[Step] = []
    for raw in text.split(","):
        entry = raw.strip()
        name, _, arg = entry.partition(":")
        if name == "hang" and not arg:
            steps.append(_hang)
        elif name == "lost" and not arg:
            steps.append(ConnectionResetError(LOST_REPLY))
        elif name == "ok" and not arg:
            steps.append(_ok)
        elif name == "slow":
            try:
                seconds = float(arg)
            except ValueError:
                raise ScriptInvalid(f"model script: {entry!r} needs seconds, as slow:2") from None
            if not seconds >= 0:
                raise ScriptInvalid(f"model script: {entry!r} needs non-negative seconds")
            steps.append(_slow(seconds))
        else:
            raise ScriptInvalid(
                f"model script: unknown step {entry!r} (known: hang, lost, ok, slow:S)"
            )
    return steps


def scripted_model(text: str | None) -> ReferenceModelClient:
    """The reference model, with `text`'s script when given."""
    return ReferenceModelClient(script=parse_model_script(text) if text else [])


# -- store crash plans ------------------------------------------------------------------


def _sigkill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class StoreCrashPlan:
    """SIGKILL this process right after the `nth` committed call of `method`."""

    method: str
    nth: int = 1
    kill: Callable[[], None] = field(default=_sigkill_self, repr=False)
    hits: int = 0

    def __post_init__(self) -> None:
        if self.method not in CRASH_METHODS:
            raise ScriptInvalid(
                f"{CRASH_ENV}: unknown JobStore method {self.method!r} "
                f"(known: {', '.join(CRASH_METHODS)})"
            )
        if self.nth < 1:
            raise ScriptInvalid(f"{CRASH_ENV}: hit count must be 1 or more, got {self.nth}")

    @classmethod
    def parse(cls, text: str) -> StoreCrashPlan:
        name, sep, count = text.strip().partition(":")
        nth = 1
        if sep:
            try:
                nth = int(count)
            except ValueError:
                raise ScriptInvalid(f"{CRASH_ENV}: hit count {count!r} is not an integer") from None
        return cls(name, nth)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StoreCrashPlan | None:
        value = (os.environ if environ is None else environ).get(CRASH_ENV, "")
        return cls.parse(value) if value.strip() else None

    def describe(self) -> str:
        return f"{self.method}:{self.nth}"

    def returned(self, method: str, result: object) -> None:
        if method != self.method or (method == "claim_one" and result is None):
            return
        self.hits += 1
        if self.hits != self.nth:
            return
        line = f"vessel: crash plan {CRASH_ENV}={self.describe()}: SIGKILL pid {os.getpid()}\n"
        with suppress(OSError):
            os.write(2, line.encode("utf-8", "replace"))
        self.kill()


class CrashingJobStore:
    """A JobStore that hands every call to `inner` and reports returns to the plan."""

    def __init__(self, inner: JobStore, plan: StoreCrashPlan) -> None:
        self._inner = inner
        self._plan = plan

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in CRASH_METHODS:
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = await attr(*args, **kwargs)
            self._plan.returned(name, result)
            return result

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._inner, name, value)


def crashing(store: JobStore, plan: StoreCrashPlan | None) -> JobStore:
    return store if plan is None else cast(JobStore, CrashingJobStore(store, plan))
