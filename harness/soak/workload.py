"""The soak's traffic: a seeded mix of Patterns, verdicts, cancels and key reuse."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

MIX: tuple[tuple[str, float], ...] = (
    ("echo", 0.3), ("two_step", 0.2), ("consent_gate", 0.25), ("service_call", 0.1),
    ("chatty", 0.15),
)
CONTENT: dict[str, dict[str, Any]] = {"chatty": {"tokens": 30}}
"""`chatty` hops stay RUNNING for about 1.5 s: a Vessel that takes a live
Vessel's hops for orphans (a boot that fences work it does not own) is seen."""
CANCEL_SHARE = 0.1
REPLAY_SHARE = 0.2
APPROVE_SHARE = 0.8


@dataclass(frozen=True)
class RunPlan:
    """What one client does for one Run."""

    key: str
    pattern: str
    content: dict[str, Any]
    cancel: bool
    """The operator cancels it right after admission."""
    replay: bool
    """The client submits the same key a second time and must get the same Run."""

    def body(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "prompt": f"soak {self.key}", "content": self.content}


def plans(runs: int, seed: int) -> list[RunPlan]:
    """`runs` plans, the same for the same seed."""
    rng = random.Random(f"soak-workload-{seed}")
    names = [name for name, _ in MIX]
    weights = [weight for _, weight in MIX]
    out = []
    for i in range(runs):
        pattern = rng.choices(names, weights)[0]
        out.append(RunPlan(
            key=f"soak-{seed}-{i}", pattern=pattern, content=dict(CONTENT.get(pattern, {})),
            cancel=rng.random() < CANCEL_SHARE, replay=rng.random() < REPLAY_SHARE,
        ))
    return out


def approves(consent_id: str, seed: int) -> bool:
    """The approver's verdict on one consent: fixed by the seed and the consent."""
    return random.Random(f"soak-verdict-{seed}-{consent_id}").random() < APPROVE_SHARE
