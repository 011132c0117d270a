"""What a node asks for next. A node returns the new state, or the new state
and one of these transitions; a bare state moves on to the following node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.service.models import CapabilityBinding, ToolBinding


@dataclass(frozen=True)
class Goto:
    node: str


@dataclass(frozen=True)
class End:
    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AwaitConsent:
    """Park the Run until a human decides; resume at `then` with the verdict.

    `approvals` is how many approvals the model asked for in this round: the
    Bridge admits exactly one (seed 003, "Return makes a new claim").
    """

    then: str
    prompt: str = ""
    approvals: int = 1


@dataclass(frozen=True)
class AwaitDelegate:
    """Hand work to the agent runtime; resume at `then` with its terminal result."""

    then: str
    request: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AwaitService:
    """Hand long-running work to a provider as one ServiceJobAttempt@1 under
    `binding`; resume at `then` with the attempt once it is proven terminal
    (seed 000, "Service job attempts")."""

    then: str
    binding: CapabilityBinding | ToolBinding
    request: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NeedHardware:
    """Wait live for the orchestrator to make `capability` ready; continue at `then`."""

    capability: str
    then: str


Transition = Goto | End | AwaitConsent | AwaitDelegate | AwaitService | NeedHardware
