"""Hardware resume budgets (seed 003, "Three boundaries").

At most 8 hardware convergence calls per Run and 3 in a row for one
capability. The counters live in the workflow state, so they travel in the
checkpoint and survive parks and replacement runners. A state written
before the field existed decodes with zero counters.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_TOTAL = 8
MAX_CONSECUTIVE = 3


class HardwareBudgetExhausted(Exception):
    def __init__(self, capability: str, budget: HardwareResumeBudget) -> None:
        super().__init__(
            f"hardware budget exhausted for {capability!r}: {budget.total}/{MAX_TOTAL} calls, "
            f"{budget.consecutive}/{MAX_CONSECUTIVE} in a row"
        )


class HardwareResumeBudget(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int = Field(default=0, ge=0)
    consecutive: int = Field(default=0, ge=0)
    last_capability: str | None = None

    def charge(self, capability: str) -> HardwareResumeBudget:
        """The budget after one more call for `capability`; raises before exceeding it."""
        consecutive = self.consecutive + 1 if capability == self.last_capability else 1
        if self.total + 1 > MAX_TOTAL or consecutive > MAX_CONSECUTIVE:
            raise HardwareBudgetExhausted(capability, self)
        return HardwareResumeBudget(
            total=self.total + 1, consecutive=consecutive, last_capability=capability
        )


class HardwareState(BaseModel):
    """Base for every workflow state that can request hardware."""

    model_config = ConfigDict(extra="forbid")

    hardware_resume_budget: HardwareResumeBudget = Field(default_factory=HardwareResumeBudget)
