"""Typed results of `simulate`, `campaign` and `shrink` (pydantic models).

Each failing result carries the exact command that replays it; the models are
JSON-serialisable (`model_dump_json`) apart from the raw simulator result a
`SimulationResult` keeps for its trace.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from sim.faults.plan import FaultPlan
from sim.kernel import SimResult

Verdict = Literal["ok", "violation", "deadlock", "error"]


class SimulationResult(BaseModel):
    """One seed of an app: its verdict, what it exercised, and how to replay it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    app: str
    seed: int
    profile: str = Field(description="the fault profile, or 'plan' for an exact fault plan")
    verdict: Verdict
    invariant: str | None = Field(
        default=None, description="the broken invariant or assertion (or the verdict)")
    message: str | None = None
    records: dict[str, Any] = Field(default_factory=dict)
    trace_hash: str
    runs: int
    boots: int
    virtual_s: float
    wall_s: float
    plan: FaultPlan = Field(description="the faults that fired: replay them exactly")
    sometimes: dict[str, bool] = Field(
        default_factory=dict, description="each sometimes() reached: was it ever true")
    always: dict[str, int] = Field(
        default_factory=dict, description="each always() reached: times evaluated")
    effects: dict[str, int] = Field(
        default_factory=dict, description="ctx.effect applications per identity")
    replay: str = Field(description="the command that replays this seed")
    _raw: SimResult | None = PrivateAttr(default=None)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def sim_result(self) -> SimResult:
        """The simulator's own result (sim.kernel.SimResult): trace, ledger, world."""
        if self._raw is None:
            raise ValueError("this result was loaded, not simulated: it has no raw result")
        return self._raw

    def trace(self) -> list[str]:
        """The simulation's trace, one JSON line per event (byte-identical per seed)."""
        return list(self._raw.trace_lines) if self._raw is not None else []

    def explain(self) -> str:
        """One paragraph for an assertion message: what broke and how to replay it."""
        if self.ok:
            return f"{self.app} seed {self.seed}: ok"
        return (f"{self.app} seed {self.seed} ({self.profile}): {self.verdict} "
                f"[{self.invariant}] {self.message}\n  replay: {self.replay}")


class SeedOutcome(BaseModel):
    """One seed of a campaign, as the campaign report lists it."""

    seed: int
    verdict: Verdict
    invariant: str | None = None
    message: str | None = None
    trace_hash: str
    runs: int
    virtual_s: float
    replay: str


class CampaignResult(BaseModel):
    """Every seed of a campaign, its failures, and the sometimes() never seen true."""

    app: str
    profile: str
    seeds: list[SeedOutcome]
    never_true: list[str] = Field(
        default_factory=list,
        description="sometimes() assertions reached but never true in any seed")
    wall_s: float

    @property
    def failures(self) -> list[SeedOutcome]:
        return [s for s in self.seeds if s.verdict != "ok"]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.never_true


class ShrinkResult(BaseModel):
    """The smallest fault plan found that still breaks the same invariant."""

    app: str
    seed: int
    profile: str
    invariant: str | None
    message: str | None
    faults_before: int
    plan: FaultPlan
    attempts: int = Field(description="simulations the shrink ran")
    replay: str = Field(description="replays the shrunk plan (once saved to plan_path)")
    plan_path: str
