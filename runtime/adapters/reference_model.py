"""A deterministic, offline ModelClient for tests and the simulator.

Seed 004_85033eb8fc772f12.txt describes a worker around a networked model;
this client stands in for it. Its reply is a pure function of the request:
one assertion per non-empty payload line (`subject: value`), and a `needs`
marker when a line reads `needs: ontology|identity|review`. Usage counts
characters. Scripted behaviour for tests is queued in `script`: each entry
is consumed by one call and is either an exception to raise, a ModelReply to
return, or an async callable producing either (to hang, advance a fake
clock, or let another worker act mid-call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.jobs.model import ContextTooLarge, ModelReply, ModelRequest
from runtime.jobs.models import Usage

Step = BaseException | ModelReply | Callable[[ModelRequest], Awaitable[ModelReply | None]]


@dataclass
class ReferenceModelClient:
    version: str = "reference-1"
    context_limit: int = 4096
    script: list[Step] = field(default_factory=list)
    calls: list[ModelRequest] = field(default_factory=list)

    async def extract(self, request: ModelRequest) -> ModelReply:
        self.calls.append(request)
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, ModelReply):
                return step
            produced = await step(request)
            if produced is not None:
                return produced
        if len(request.payload) > self.context_limit:
            raise ContextTooLarge(f"{len(request.payload)} > {self.context_limit} characters")
        return self.reply(request)

    def reply(self, request: ModelRequest) -> ModelReply:
        assertions: list[dict[str, Any]] = []
        needs: str | None = None
        for line in request.payload.splitlines():
            subject, sep, value = line.partition(":")
            subject, value = subject.strip(), value.strip()
            if not subject:
                continue
            if subject == "needs" and value in ("ontology", "identity", "review"):
                needs = value
                continue
            assertions.append({"subject": subject, "value": value if sep else None})
        usage = Usage(input_tokens=len(request.payload), output_tokens=len(assertions))
        return ModelReply(
            model_version=self.version,
            output={"assertions": assertions, "needs": needs},
            usage=usage,
        )
