"""The ModelClient seam: one extraction call over preserved evidence.

Seed 004_85033eb8fc772f12.txt, "Bounded retries": a call runs outside any
transaction under the worker's 45 s deadline. The client reports failures
with the typed errors below; anything else it raises is treated like a
retryable transport failure whose usage is unknown. Production would wrap a
provider SDK; `runtime.adapters.reference_model.ReferenceModelClient` is the
deterministic implementation for tests and the simulator.
"""

from __future__ import annotations

from typing import Any, Protocol
from uuid import UUID

from pydantic import Field

from runtime.jobs.models import STAGED_STATES, JobState, Usage
from runtime.models import Frozen


class ModelRequest(Frozen):
    job_id: UUID
    workspace: str
    interpretation: int = Field(ge=1)
    call: int = Field(ge=1, description="the reserved call number")
    model_version: str
    media_type: str
    payload: str


class ModelReply(Frozen):
    model_version: str
    output: Any = Field(description="unvalidated: the worker checks its shape")
    usage: Usage | None = None


class ModelError(Exception):
    """Base of the failures a ModelClient reports on purpose."""

    def __init__(self, message: str, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage


class RetryableModelError(ModelError):
    """Rate limit, overload, a transport error: worth another bounded attempt."""


class ContextTooLarge(ModelError):
    """The payload does not fit the model's context: processing fails, the evidence stays."""


class ModelClient(Protocol):
    @property
    def version(self) -> str:
        """The model version this client calls (checked again at staging)."""
        ...

    @property
    def context_limit(self) -> int:
        """The largest payload, in characters, the model accepts."""
        ...

    async def extract(self, request: ModelRequest) -> ModelReply: ...


NEEDS = {
    "ontology": JobState.WAITING_ONTOLOGY,
    "identity": JobState.WAITING_IDENTITY,
    "review": JobState.WAITING_REVIEW,
}


class InvalidOutput(ValueError):
    """The model's output does not have the bundle's shape."""


def read_bundle(output: Any) -> tuple[JobState, dict[str, Any]]:
    """Validate a model output into (staged state, bundle).

    A bundle is `{"assertions": [object, ...], "needs": null | "ontology" |
    "identity" | "review"}`. `needs` names the dependency a waiting state
    requires; without one the interpretation is published.
    """
    if not isinstance(output, dict):
        raise InvalidOutput(f"output must be an object, got {type(output).__name__}")
    assertions = output.get("assertions")
    if not isinstance(assertions, list) or not all(isinstance(a, dict) for a in assertions):
        raise InvalidOutput("output.assertions must be a list of objects")
    extra = sorted(set(output) - {"assertions", "needs"})
    if extra:
        raise InvalidOutput(f"output has unknown fields {extra}")
    needs = output.get("needs")
    if needs is None:
        return JobState.PUBLISHED, {"assertions": assertions, "needs": None}
    if not isinstance(needs, str) or needs not in NEEDS:
        raise InvalidOutput(f"output.needs must be one of {sorted(NEEDS)} or null")
    state = NEEDS[needs]
    assert state in STAGED_STATES
    return state, {"assertions": assertions, "needs": needs}
