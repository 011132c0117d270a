"""The options that put delegated jobs on leased workers (issue 8 items 3 and 6).

`vessel serve --agents leased --workspace W` and the lease, deadline and
fault options of `vessel jobs work`: every mistake is one line and exit
status 2 before anything starts; the faults themselves (model scripts and
store crash plans) do exactly what `runtime.adapters.worker_faults` says.
"""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

import anyio
import pytest
from typer.testing import CliRunner

from runtime.adapters.memory.jobs_store import MemoryJobStore
from runtime.adapters.worker_faults import (
    LOST_REPLY,
    CrashingJobStore,
    ScriptInvalid,
    StoreCrashPlan,
    scripted_model,
)
from runtime.app.cli import cli
from runtime.jobs import EvidenceRecord, JobState, ModelRequest, new_job
from tests.unit.fakes import FakeClock

CLEAN_ENV: dict[str, str | None] = {
    "VESSEL_TOKENS": None, "VESSEL_TOKEN": "t", "VESSEL_CRASH_AT": None, "VESSEL_DSN": None,
    "VESSEL_JOBS_CRASH_AT": None,
}


def invoke(args: list[str], **env: str) -> Any:
    return CliRunner().invoke(cli, args, env={**CLEAN_ENV, **env}, catch_exceptions=False)


def one_line(result: Any, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("vessel: ")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(("args", "words"), [
    (["serve", "--memory", "--agents", "leased", "--workspace", "w"], ["needs --dsn"]),
    (["serve", "--dsn", "postgresql://x", "--agents", "leased"], ["needs --workspace"]),
    (["serve", "--dsn", "postgresql://x", "--agents", "leased", "--workspace", " w"],
     ["needs --workspace"]),
    (["serve", "--dsn", "postgresql://x", "--agents", "leased", "--workspace", "w",
      "--agent-model", " "], ["--agent-model"]),
    (["serve", "--memory", "--agents", "remote"], ["reference or leased"]),
    (["serve", "--memory", "--workspace", "w"], ["only to --agents leased"]),
])
def test_serve_agent_mistakes_exit_2_with_one_line(args: list[str], words: list[str]) -> None:
    one_line(invoke(args), *words)


@pytest.mark.parametrize(("args", "env", "words"), [
    (["--lease-s", "2", "--renew-every-s", "2"], {}, ["shorter than --lease-s"]),
    (["--lease-s", "0", "--renew-every-s", "-1"], {}, ["invalid lease or deadline"]),
    (["--model-deadline-s", "0"], {}, ["model_deadline_s"]),
    (["--model-script", "hang,explode"], {}, ["unknown step 'explode'"]),
    (["--model-script", "slow:soon"], {}, ["slow:2"]),
    ([], {"VESSEL_JOBS_CRASH_AT": "publish"}, ["unknown JobStore method 'publish'"]),
    ([], {"VESSEL_JOBS_CRASH_AT": "stage:0"}, ["1 or more"]),
    ([], {"VESSEL_JOBS_CRASH_AT": "stage:x"}, ["not an integer"]),
    ([], {"VESSEL_CRASH_AT": "job.inference_return"}, ["unknown fault point",
                                                       "job.inference_returned"]),
    ([], {"VESSEL_CRASH_AT": "job.inference_returned:0"}, ["1 or more"]),
])
def test_worker_fault_and_lease_mistakes_exit_2(
    args: list[str], env: dict[str, str], words: list[str]
) -> None:
    one_line(invoke(["jobs", "work", "--memory", "--workspace", "w", *args], **env), *words)


def request(call: int = 1) -> ModelRequest:
    return ModelRequest(job_id=UUID(int=1), workspace="w", interpretation=1, call=call,
                        model_version="reference-1", media_type="text/plain", payload="a: b")


@pytest.mark.anyio
async def test_a_model_script_is_consumed_one_step_per_call() -> None:
    model = scripted_model("lost,slow:0,ok,hang")
    with pytest.raises(ConnectionResetError, match=re.escape(LOST_REPLY)):
        await model.extract(request(1))
    for call in (2, 3):
        reply = await model.extract(request(call))
        assert reply.output == {"assertions": [{"subject": "a", "value": "b"}], "needs": None}
    with anyio.move_on_after(0.05) as scope:
        await model.extract(request(4))
    assert scope.cancelled_caught  # hang never answers
    assert (await model.extract(request(5))).usage is not None  # then the reference


def test_a_script_names_only_known_steps() -> None:
    with pytest.raises(ScriptInvalid):
        scripted_model("hang:3")


@pytest.mark.anyio
async def test_a_store_crash_plan_fires_after_the_nth_committed_call() -> None:
    kills: list[str] = []
    plan = StoreCrashPlan("claim_one", 2, kill=lambda: kills.append("kill"))
    inner = MemoryJobStore()
    store = CrashingJobStore(inner, plan)
    clock = FakeClock()
    for n in (1, 2):
        evidence = EvidenceRecord(id=UUID(int=100 + n), workspace="w", payload="a: b",
                                  received_at=clock.now())
        await inner.receive(evidence, new_job(UUID(int=n), evidence, "m", clock.now()))

    assert await store.claim_one("other", "w1", clock.now(), 90) is None  # claimed nothing
    first = await store.claim_one("w", "w1", clock.now(), 90)
    assert first is not None and kills == []
    second = await store.claim_one("w", "w1", clock.now(), 90)
    assert second is not None and kills == ["kill"]  # after the commit, before the answer
    assert (await inner.get(second.id)) == second and second.state is JobState.QUEUED
    store.renew_every_s = 1.0  # configuration reaches the wrapped store
    assert inner.renew_every_s == 1.0
    assert StoreCrashPlan.from_env({}) is None
    assert StoreCrashPlan.from_env({"VESSEL_JOBS_CRASH_AT": "stage:3"}) == StoreCrashPlan(
        "stage", 3)
