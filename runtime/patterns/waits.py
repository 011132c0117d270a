"""Patterns that pause: `consent_gate`, `delegate`, `service_call`, `hardware`,
`effectful`.

Used by tests and simulator scenarios. Each reads what resumed it from the
hop context (the stored verdict, job result or service attempt), never from its input.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runtime.graph.budget import HardwareState
from runtime.graph.transitions import (
    AwaitConsent,
    AwaitDelegate,
    AwaitService,
    End,
    Goto,
    NeedHardware,
)
from runtime.hop import HopContext
from runtime.models import AgentJobStatus, ConsentStatus
from runtime.registry import Node, Pattern
from runtime.service.models import CapabilityBinding, ServiceState


class GateState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(default=1, ge=0, le=10, description="approval rounds still to ask")
    approvals: int = Field(default=1, ge=1, le=5, description="approvals asked per round")
    verdicts: list[str] = Field(default_factory=list)


async def _ask(ctx: HopContext, state: GateState) -> tuple[GateState, Any]:
    return state, AwaitConsent(then="decided", prompt="may I?", approvals=state.approvals)


async def _decided(ctx: HopContext, state: GateState) -> tuple[GateState, Any]:
    consent = ctx.consent
    assert consent is not None, "a resumed gate always carries its stored verdict"
    state = state.model_copy(
        update={"verdicts": [*state.verdicts, consent.status.value], "rounds": state.rounds - 1}
    )
    if consent.status is ConsentStatus.APPROVED:
        await ctx.effect(f"approved-{len(state.verdicts)}", {"consent": str(consent.id)})
    if state.rounds > 0:
        return state, Goto("ask")
    return state, End(result={"verdicts": state.verdicts})


CONSENT_GATE = Pattern(
    name="consent_gate", version=1, state_model=GateState,
    nodes=(Node("ask", _ask), Node("decided", _decided)),
)


class DelegateState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = "summarise"


async def _hand_off(ctx: HopContext, state: DelegateState) -> tuple[DelegateState, Any]:
    return state, AwaitDelegate(then="adopt", request={"task": state.task})


async def _adopt(ctx: HopContext, state: DelegateState) -> tuple[DelegateState, Any]:
    job = ctx.agent_job
    assert job is not None, "a resumed delegate always carries its terminal job"
    if job.status is not AgentJobStatus.SUCCEEDED or job.result is None:
        raise RuntimeError(f"delegated job {job.id} ended {job.status.value}")
    return state, End(result={"job": str(job.id), "answer": job.result})


DELEGATE = Pattern(
    name="delegate", version=1, state_model=DelegateState,
    nodes=(Node("hand_off", _hand_off), Node("adopt", _adopt)),
)


RENDER = CapabilityBinding(
    interface="render", profile_revision="r1", profile_digest="sha256:render-r1",
    operation="render", driver_revision="d1", dialect_revision="v1",
)


class ServiceCallState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = "render"


async def _send(ctx: HopContext, state: ServiceCallState) -> tuple[ServiceCallState, Any]:
    return state, AwaitService(then="collect", binding=RENDER, request={"task": state.task})


async def _collect(ctx: HopContext, state: ServiceCallState) -> tuple[ServiceCallState, Any]:
    attempt = ctx.service_attempt
    assert attempt is not None, "a resumed service call always carries its terminal attempt"
    if attempt.state is not ServiceState.SUCCEEDED:
        raise RuntimeError(f"service attempt {attempt.id} ended {attempt.state.value}")
    return state, End(result={"attempt": str(attempt.id), "answer": attempt.result})


SERVICE_CALL = Pattern(
    name="service_call", version=1, state_model=ServiceCallState,
    nodes=(Node("send", _send), Node("collect", _collect)),
)


class ErrandsState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(default=2, ge=1, le=4, description="delegate-then-service rounds left")
    answers: list[Any] = Field(default_factory=list)


async def _errand_delegate(ctx: HopContext, state: ErrandsState) -> tuple[ErrandsState, Any]:
    return state, AwaitDelegate(then="errand_service", request={"task": "fetch"})


async def _errand_service(ctx: HopContext, state: ErrandsState) -> tuple[ErrandsState, Any]:
    job = ctx.agent_job
    assert job is not None, "a resumed errand always carries its terminal job"
    # An errand tolerates a failed child: it notes the outcome and goes on, so the
    # Run keeps owning more children (the point of the pattern).
    state = state.model_copy(update={"answers": [*state.answers, job.status.value]})
    return state, AwaitService(then="errand_done", binding=RENDER, request={"task": "render"})


async def _errand_done(ctx: HopContext, state: ErrandsState) -> tuple[ErrandsState, Any]:
    attempt = ctx.service_attempt
    assert attempt is not None, "a resumed errand always carries its terminal attempt"
    state = state.model_copy(update={"answers": [*state.answers, attempt.state.value],
                                     "rounds": state.rounds - 1})
    if state.rounds > 0:
        return state, Goto("errand_delegate")
    return state, End(result={"answers": state.answers})


ERRANDS = Pattern(
    name="errands", version=1, state_model=ErrandsState,
    nodes=(Node("errand_delegate", _errand_delegate), Node("errand_service", _errand_service),
           Node("errand_done", _errand_done)),
)
"""Rounds of a delegated job then a service call: one Run owns several agent jobs and
several attempts, the earlier ones terminal (what a cancel's sweep must walk past)."""


class HardwareNeeds(HardwareState):
    needs: list[str] = Field(default_factory=lambda: ["gpu"])
    used: list[str] = Field(default_factory=list)


async def _load(ctx: HopContext, state: HardwareNeeds) -> tuple[HardwareNeeds, Any]:
    if not state.needs:
        return state, Goto("infer")
    capability, rest = state.needs[0], state.needs[1:]
    state = state.model_copy(update={"needs": rest, "used": [*state.used, capability]})
    return state, NeedHardware(capability=capability, then="load")


async def _infer(ctx: HopContext, state: HardwareNeeds) -> tuple[HardwareNeeds, Any]:
    budget = state.hardware_resume_budget
    return state, End(result={"used": state.used, "calls": budget.total})


HARDWARE = Pattern(
    name="hardware", version=1, state_model=HardwareNeeds,
    nodes=(Node("load", _load), Node("infer", _infer)),
)


async def _effect(ctx: HopContext, state: dict[str, Any]) -> dict[str, Any]:
    applied = await ctx.effect("effect", {"n": state.get("n")})
    return {**state, "identity": ctx.effect_identity("effect"), "applied_now": applied}


EFFECTFUL = Pattern(name="effectful", version=1, nodes=(Node("effect", _effect),))
