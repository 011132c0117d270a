"""The HTTP surface on the memory profile: every route and status code, the
credential rules, and every bad input of issue M6, each refused with a JSON
body naming the problem and nothing written (the ledger dump and the broker's
jobs are compared before and after).

Spec: seed 000_81a5c720b14d934a.txt ("Admission and exact claim", "Events,
settlement, and waits", "Cancellation, mutation, and recovery") as
`runtime.app.http` states it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID, uuid4

import anyio
import httpx
import pytest
from fastapi import FastAPI

from runtime.adapters.memory import MemoryBroker, MemoryLedger
from runtime.adapters.system import SystemClock
from runtime.app.auth import CredentialsInvalid, tokens_from_env
from runtime.app.factories import vessel_lifespan
from runtime.app.http import begin_draining, create_app
from runtime.app.profiles import Vessel, build_vessel, make_deps, memory_vessel
from runtime.models import AgentJob, AgentJobStatus, ConsentStatus, RunStatus
from runtime.seams import AgentJobReport
from tests.bounds import HANG_S, SETTLE_S

pytestmark = pytest.mark.anyio

ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
TOKENS = {"alice": "tok-alice", "bob": "tok-bob"}
CONCURRENCY = {"runs": 2, "rites": 1}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class StubbornAgents:
    """An agent runtime whose jobs never finish and never acknowledge containment."""

    def __init__(self) -> None:
        self.submitted: list[UUID] = []

    async def submit(self, job: AgentJob) -> None:
        self.submitted.append(job.id)

    async def lookup(self, job_id: UUID) -> AgentJobReport | None:
        return AgentJobReport(status=AgentJobStatus.RUNNING)

    async def cancel(self, job_id: UUID) -> bool:
        return False


@dataclass
class Api:
    client: httpx.AsyncClient
    vessel: Vessel
    app: FastAPI

    async def state(self) -> tuple[Any, dict[str, Any]]:
        """Everything durable, and the broker's jobs: what 'nothing written' compares.

        Taken once no broker job is live any more, so a hop that is still
        finishing (its job turning complete) is not mistaken for a write.
        """
        broker = self.vessel.deps.broker
        assert isinstance(broker, MemoryBroker)
        with anyio.move_on_after(SETTLE_S):
            while any(status.live for status in broker.statuses().values()):
                await anyio.sleep(0.01)
        dump = await self.vessel.deps.ledger.dump()
        return dump, dict(broker.statuses())

    async def submit(self, body: dict[str, Any], headers: dict[str, str] | None = None,
                     key: str | None = None) -> httpx.Response:
        extra = {"Idempotency-Key": key} if key is not None else {}
        return await self.client.post("/runs", json=body, headers={**(headers or ALICE), **extra})

    async def run(self, run_id: str | UUID) -> dict[str, Any]:
        response = await self.client.get(f"/runs/{run_id}", headers=ALICE)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def wait_status(self, run_id: str | UUID, *statuses: str,
                          within: float = 10.0) -> dict[str, Any]:
        body: dict[str, Any] = {}
        with anyio.move_on_after(within):
            while True:
                body = await self.run(run_id)
                if body["status"] in statuses:
                    return body
                await anyio.sleep(0.02)
        raise AssertionError(f"Run {run_id} never reached {statuses}: {body}")

    async def parked_consent(self, session: str | None = None) -> tuple[str, str]:
        body: dict[str, Any] = {"pattern": "consent_gate"}
        if session is not None:
            body["session"] = session
        response = await self.submit(body)
        assert response.status_code == 201, response.text
        run = await self.wait_status(response.json()["id"], "AWAITING_CONSENT")
        return run["id"], run["consent_id"]


async def _serve(vessel: Vessel, **kwargs: Any) -> AsyncIterator[Api]:
    app = create_app(vessel_lifespan(vessel), kwargs.pop("credentials", TOKENS), **kwargs)
    # Without credentials only loopback Host names are answered (runtime.app.limits).
    base_url = "http://localhost" if kwargs.get("insecure_local") else "http://vessel"
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            yield Api(client, vessel, app)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in _serve(memory_vessel(concurrency=CONCURRENCY)):
        yield served


@pytest.fixture
async def stubborn_api() -> AsyncIterator[Api]:
    """Agent jobs never acknowledge containment: cancellation stays CANCELLING."""
    clock = SystemClock()
    deps = dataclasses.replace(
        make_deps(MemoryLedger(), MemoryBroker(clock), clock=clock), agents=StubbornAgents()
    )
    async for served in _serve(build_vessel(deps, concurrency=CONCURRENCY)):
        yield served


def sse_frames(text: str) -> list[dict[str, Any]]:
    """Parse an event stream: id, event and the JSON data of every frame."""
    frames = []
    for block in text.split("\n\n"):
        lines = [line for line in block.splitlines() if line and not line.startswith(":")]
        if not lines:
            continue
        fields = dict(line.split(": ", 1) for line in lines)
        frames.append({"id": int(fields["id"]), "event": fields["event"],
                       "data": json.loads(fields["data"])})
    return frames


def assert_error(response: httpx.Response, status: int, error: str | None = None,
                 field: str | None = None, words: Iterable[str] = ()) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert set(body) <= {"error", "field", "reason", "details"} and body["reason"]
    if error is not None:
        assert body["error"] == error, body
    if field is not None:
        assert body["field"] == field, body
    for word in words:
        assert word in body["reason"], body
    assert "Traceback" not in response.text
    return body


# -- health and credentials ------------------------------------------------------------


async def test_health_needs_no_credential_and_reports_startup_state(api: Api) -> None:
    response = await api.client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["phase"] == "ready" and body["ready"] is True
    assert body["boot_id"] == api.vessel.deps.boot_id
    assert body["profile"] == "memory" and body["strict"] is False
    assert body["degraded"] == []
    assert body["queues"] == {"rites": {"concurrency": 1}, "runs": {"concurrency": 2}}
    assert body["broker_connected"] is True and body["relay_restarts"] == 0


async def test_nothing_is_served_before_the_lifespan_started() -> None:
    app = create_app(vessel_lifespan(memory_vessel()), TOKENS)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://vessel") as client:
        health = await client.get("/health")
        assert health.status_code == 503 and health.json()["phase"] == "starting"
        refused = await client.get(f"/runs/{uuid4()}", headers=ALICE)
        assert_error(refused, 503, "not_ready", words=["starting"])


PROTECTED = [
    ("POST", "/runs", {"pattern": "echo"}),
    ("GET", "/runs/{run}", None),
    ("POST", "/runs/{run}/cancel", None),
    ("POST", "/consents/{consent}/decision", {"approve": True}),
    ("GET", "/runs/{run}/events", None),
    ("GET", "/openapi.json", None),
    ("GET", "/no/such/route", None),
]
BAD_CREDENTIALS = [
    ({}, "missing"),
    ({"Authorization": "Bearer wrong"}, "not valid"),
    ({"Authorization": "Basic dG9rLWFsaWNlOg=="}, "Bearer"),
    ({"Authorization": "Bearer "}, "Bearer"),
    ({"Authorization": "tok-alice"}, "Bearer"),
]


@pytest.mark.parametrize(("method", "path", "body"), PROTECTED)
@pytest.mark.parametrize(("headers", "words"), BAD_CREDENTIALS)
async def test_every_route_but_health_refuses_a_missing_or_wrong_token(
    api: Api, method: str, path: str, body: dict[str, Any] | None,
    headers: dict[str, str], words: str,
) -> None:
    run_id, consent_id = await api.parked_consent()
    before = await api.state()
    url = path.format(run=run_id, consent=consent_id)
    response = await api.client.request(method, url, json=body, headers=headers)
    assert_error(response, 401, "unauthorized", "Authorization", [words])
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert await api.state() == before


async def test_the_principal_comes_from_the_token_and_scopes_idempotency(api: Api) -> None:
    mine = await api.submit({"pattern": "echo", "prompt": "x"}, ALICE, key="k")
    theirs = await api.submit({"pattern": "echo", "prompt": "x"}, BOB, key="k")
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["principal"] == "alice" and theirs.json()["principal"] == "bob"
    assert mine.json()["id"] != theirs.json()["id"]


def test_create_app_refuses_to_exist_without_credentials_unless_insecure_local() -> None:
    with pytest.raises(CredentialsInvalid, match="no credentials"):
        create_app(vessel_lifespan(memory_vessel()), None)
    with pytest.raises(CredentialsInvalid, match="no credentials"):
        create_app(vessel_lifespan(memory_vessel()), {})
    assert create_app(vessel_lifespan(memory_vessel()), None, insecure_local=True)


async def test_insecure_local_serves_everyone_as_principal_local() -> None:
    async for served in _serve(memory_vessel(), credentials=None, insecure_local=True):
        response = await served.client.post("/runs", json={"pattern": "echo"})
        assert response.status_code == 201 and response.json()["principal"] == "local"


def test_tokens_from_the_environment() -> None:
    env = {"VESSEL_TOKENS": " alice:t1 , bob:t2,", "VESSEL_TOKEN": "t3"}
    assert tokens_from_env(env) == {"alice": "t1", "bob": "t2", "operator": "t3"}
    assert tokens_from_env({}) == {}
    for bad, words in [
        ({"VESSEL_TOKENS": "alice"}, "not principal:token"),
        ({"VESSEL_TOKENS": "alice:"}, "not principal:token"),
        ({"VESSEL_TOKENS": ":t1"}, "not principal:token"),
        ({"VESSEL_TOKENS": "alice:t1,alice:t2"}, "more than once"),
        ({"VESSEL_TOKENS": "alice:t1,bob:t1"}, "reuses"),
        ({"VESSEL_TOKENS": "operator:t1", "VESSEL_TOKEN": "t2"}, "more than once"),
    ]:
        with pytest.raises(CredentialsInvalid, match=words) as info:
            tokens_from_env(bad)
        message = str(info.value)
        assert "t1" not in message and "t2" not in message, "a token leaked into an error"


# -- POST /runs --------------------------------------------------------------------------


async def test_submit_admits_a_new_run_201_and_it_runs_to_done(api: Api) -> None:
    response = await api.submit({"pattern": "echo", "prompt": "hello", "priority": 70})
    assert response.status_code == 201, response.text
    body = response.json()
    assert response.headers["location"] == f"/runs/{body['id']}"
    assert body["status"] == "QUEUED" and body["priority"] == 70 and body["principal"] == "alice"
    done = await api.wait_status(body["id"], "DONE")
    assert done["result"] == {"echo": "hello"} and done["started_at"] is not None


async def test_idempotent_replay_is_200_with_the_same_run(api: Api) -> None:
    first = await api.submit({"pattern": "echo", "prompt": "once"}, key="order-1")
    assert first.status_code == 201
    await api.wait_status(first.json()["id"], "DONE")
    before = await api.state()
    again = await api.submit({"pattern": "echo", "prompt": "once"}, key="order-1")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert again.json()["idempotency_key"] == "order-1" and again.json()["status"] == "DONE"
    assert await api.state() == before


async def test_key_reused_for_different_work_is_409_and_writes_nothing(api: Api) -> None:
    first = await api.submit({"pattern": "echo", "prompt": "once"}, key="order-2")
    await api.wait_status(first.json()["id"], "DONE")
    before = await api.state()
    other = await api.submit({"pattern": "echo", "prompt": "twice"}, key="order-2")
    assert_error(other, 409, "idempotency_conflict", "Idempotency-Key", ["order-2"])
    assert await api.state() == before


async def test_a_busy_session_is_409_and_writes_nothing(api: Api) -> None:
    await api.parked_consent(session="bridge-1")
    before = await api.state()
    second = await api.submit({"pattern": "echo", "session": "bridge-1"})
    assert_error(second, 409, "session_busy", "session", ["bridge-1"])
    assert await api.state() == before


BAD_SUBMISSIONS: list[tuple[str, bytes | dict[str, Any], dict[str, str], str, list[str]]] = [
    ("malformed JSON", b'{"pattern": "echo",', {}, "body", ["malformed JSON"]),
    ("not an object", b"[1, 2]", {}, "body", []),
    ("empty body", b"", {}, "body", ["required"]),
    ("unknown field", {"pattern": "echo", "colour": "red"}, {}, "colour", ["unknown field"]),
    ("sigil in the body", {"pattern": "echo", "sigil": "bob"}, {}, "sigil", ["credential"]),
    ("key in the body", {"pattern": "echo", "idempotency_key": "k"}, {}, "idempotency_key",
     ["Idempotency-Key"]),
    ("priority 101", {"pattern": "echo", "priority": 101}, {}, "priority", ["100"]),
    ("priority -1", {"pattern": "echo", "priority": -1}, {}, "priority", ["0"]),
    ("priority not an int", {"pattern": "echo", "priority": 1.5}, {}, "priority", []),
    ("no pattern", {"prompt": "x"}, {}, "pattern", ["required"]),
    ("empty pattern", {"pattern": ""}, {}, "pattern", []),
    ("unknown pattern", {"pattern": "nope"}, {}, "pattern", ["nope"]),
    ("NUL in prompt", {"pattern": "echo", "prompt": "a\x00b"}, {}, "prompt", ["NUL"]),
    ("NUL in content", {"pattern": "echo", "content": {"k\x00": 1}}, {}, "content", ["NUL"]),
    ("content the state model refuses", {"pattern": "consent_gate", "content": {"rounds": 99}},
     {}, "content.rounds", ["10"]),
    ("content with an unknown state field", {"pattern": "consent_gate", "content": {"x": 1}},
     {}, "content.x", []),
    ("blank Idempotency-Key", {"pattern": "echo"}, {"Idempotency-Key": "   "},
     "Idempotency-Key", ["empty"]),
    ("empty session", {"pattern": "echo", "session": ""}, {}, "session", []),
]


@pytest.mark.parametrize(("case", "body", "headers", "field", "words"), BAD_SUBMISSIONS,
                         ids=[c[0] for c in BAD_SUBMISSIONS])
async def test_bad_submissions_are_422_naming_the_field_and_write_nothing(
    api: Api, case: str, body: bytes | dict[str, Any], headers: dict[str, str], field: str,
    words: list[str],
) -> None:
    before = await api.state()
    if isinstance(body, bytes):
        response = await api.client.post(
            "/runs", content=body,
            headers={**ALICE, "Content-Type": "application/json", **headers})
    else:
        response = await api.client.post("/runs", json=body, headers={**ALICE, **headers})
    assert_error(response, 422, field=field, words=words)
    assert await api.state() == before


async def test_malformed_json_is_reported_as_such(api: Api) -> None:
    response = await api.client.post(
        "/runs", content=b"{nope", headers={**ALICE, "Content-Type": "application/json"})
    assert_error(response, 422, "malformed_json", "body")


# -- GET /runs/{id} ------------------------------------------------------------------------


async def test_get_run_200_and_404(api: Api) -> None:
    created = (await api.submit({"pattern": "echo"})).json()
    assert (await api.run(created["id"]))["id"] == created["id"]
    missing = await api.client.get(f"/runs/{uuid4()}", headers=ALICE)
    assert_error(missing, 404, "not_found", "run_id")
    malformed = await api.client.get("/runs/not-a-uuid", headers=ALICE)
    assert_error(malformed, 422, "invalid_request", "run_id")


# -- POST /runs/{id}/cancel -------------------------------------------------------------------


async def test_cancel_a_parked_run_is_200_cancelled(api: Api) -> None:
    run_id, consent_id = await api.parked_consent()
    response = await api.client.post(f"/runs/{run_id}/cancel", headers=ALICE)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "CANCELLED"
    consent = await api.vessel.deps.ledger.get_consent(UUID(consent_id))
    assert consent is not None and consent.status is ConsentStatus.CANCELLED
    again = await api.client.post(f"/runs/{run_id}/cancel", headers=ALICE)
    assert again.status_code == 200 and again.json()["status"] == "CANCELLED"


async def test_cancel_a_finished_run_is_200_and_changes_nothing(api: Api) -> None:
    created = (await api.submit({"pattern": "echo"})).json()
    await api.wait_status(created["id"], "DONE")
    before = await api.state()
    response = await api.client.post(f"/runs/{created['id']}/cancel", headers=ALICE)
    assert response.status_code == 200 and response.json()["status"] == "DONE"
    assert await api.state() == before


async def test_cancel_without_acknowledged_containment_is_202_cancelling(
    stubborn_api: Api,
) -> None:
    api = stubborn_api
    created = (await api.submit({"pattern": "delegate"})).json()
    await api.wait_status(created["id"], "AWAITING_DELEGATE")
    response = await api.client.post(f"/runs/{created['id']}/cancel", headers=ALICE)
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "CANCELLING"
    assert (await api.run(created["id"]))["status"] == "CANCELLING"


async def test_cancel_an_unknown_run_is_404_and_writes_nothing(api: Api) -> None:
    before = await api.state()
    response = await api.client.post(f"/runs/{uuid4()}/cancel", headers=ALICE)
    assert_error(response, 404, "not_found", "run_id")
    assert await api.state() == before


# -- POST /consents/{id}/decision -----------------------------------------------------------


async def test_the_owner_approves_and_the_run_resumes_to_done(api: Api) -> None:
    run_id, consent_id = await api.parked_consent()
    response = await api.client.post(
        f"/consents/{consent_id}/decision", json={"approve": True}, headers=ALICE)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "APPROVED" and body["decided_by"] == "alice"
    done = await api.wait_status(run_id, "DONE")
    assert done["result"] == {"verdicts": ["APPROVED"]}
    same = await api.client.post(
        f"/consents/{consent_id}/decision", json={"approve": True}, headers=ALICE)
    assert same.status_code == 200 and same.json()["status"] == "APPROVED"


async def test_a_decision_on_someone_elses_consent_is_403_and_writes_nothing(api: Api) -> None:
    run_id, consent_id = await api.parked_consent()
    before = await api.state()
    response = await api.client.post(
        f"/consents/{consent_id}/decision", json={"approve": True}, headers=BOB)
    assert_error(response, 403, "forbidden", "consent_id", ["bob"])
    assert await api.state() == before
    assert (await api.run(run_id))["status"] == "AWAITING_CONSENT"


async def test_a_decision_the_other_way_is_409_and_writes_nothing(api: Api) -> None:
    run_id, consent_id = await api.parked_consent()
    denied = await api.client.post(
        f"/consents/{consent_id}/decision", json={"approve": False}, headers=ALICE)
    assert denied.status_code == 200 and denied.json()["status"] == "DENIED"
    await api.wait_status(run_id, "DONE")
    before = await api.state()
    flipped = await api.client.post(
        f"/consents/{consent_id}/decision", json={"approve": True}, headers=ALICE)
    assert_error(flipped, 409, "consent_refused", "consent_id", ["DENIED"])
    assert await api.state() == before


async def test_a_decision_on_a_cancelled_consent_is_409(api: Api) -> None:
    run_id, consent_id = await api.parked_consent()
    await api.client.post(f"/runs/{run_id}/cancel", headers=ALICE)
    before = await api.state()
    response = await api.client.post(
        f"/consents/{consent_id}/decision", json={"approve": True}, headers=ALICE)
    assert_error(response, 409, "consent_refused", "consent_id", ["cancelled"])
    assert await api.state() == before


@pytest.mark.parametrize(("body", "field"), [
    ({"approve": "yes"}, "approve"),
    ({"approve": 1}, "approve"),
    ({}, "approve"),
    ({"approve": True, "principal": "bob"}, "principal"),
])
async def test_bad_decisions_are_422_and_write_nothing(
    api: Api, body: dict[str, Any], field: str
) -> None:
    _, consent_id = await api.parked_consent()
    before = await api.state()
    response = await api.client.post(
        f"/consents/{consent_id}/decision", json=body, headers=ALICE)
    assert_error(response, 422, "invalid_request", field)
    assert await api.state() == before


async def test_a_decision_on_an_unknown_consent_is_404_and_writes_nothing(api: Api) -> None:
    before = await api.state()
    response = await api.client.post(
        f"/consents/{uuid4()}/decision", json={"approve": True}, headers=ALICE)
    assert_error(response, 404, "not_found", "consent_id")
    assert await api.state() == before


# -- GET /runs/{id}/events -----------------------------------------------------------------------


async def test_events_of_a_finished_run_are_one_terminal_resync_boundary(api: Api) -> None:
    created = (await api.submit({"pattern": "echo", "prompt": "p"})).json()
    await api.wait_status(created["id"], "DONE")
    with anyio.fail_after(HANG_S):
        response = await api.client.get(f"/runs/{created['id']}/events", headers=ALICE)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = sse_frames(response.text)
    assert [(f["id"], f["event"]) for f in frames] == [(0, "resync")]
    snapshot = frames[0]["data"]["data"]["snapshot"]
    assert snapshot["status"] == "DONE" and snapshot["result"] == {"echo": "p"}
    assert frames[0]["data"]["data"]["reason"] == "no_live_channel"


async def test_events_stream_live_from_park_to_done_and_resume_after_a_cursor(api: Api) -> None:
    run_id, consent_id = await api.parked_consent()
    channel = api.vessel.worker.bus.get(UUID(run_id))
    assert channel is not None and channel.cursor >= 2
    parked_cursor = channel.cursor
    got: dict[str, httpx.Response] = {}

    async def read(name: str, headers: dict[str, str]) -> None:
        got[name] = await api.client.get(f"/runs/{run_id}/events", headers=headers)

    with anyio.fail_after(HANG_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read, "all", ALICE)
            tg.start_soon(read, "resumed", {**ALICE, "Last-Event-ID": "2"})
            while channel.subscriber_count < 2:
                await anyio.sleep(0.01)
            decided = await api.client.post(
                f"/consents/{consent_id}/decision", json={"approve": True}, headers=ALICE)
            assert decided.status_code == 200
    everything = sse_frames(got["all"].text)
    resumed = sse_frames(got["resumed"].text)
    ids = [f["id"] for f in everything]
    assert ids == list(range(1, len(ids) + 1)) and ids[-1] > parked_cursor
    kinds = [f["event"] for f in everything]
    assert kinds[0] == "run.claimed" and "run.parked" in kinds and kinds[-1] == "run.done"
    assert kinds.count("run.done") == 1
    assert all(f["data"]["cursor"] == f["id"] and f["data"]["kind"] == f["event"]
               for f in everything)
    assert resumed == everything[2:]


async def test_open_streams_end_when_the_server_begins_draining(api: Api) -> None:
    run_id, _ = await api.parked_consent()
    channel = api.vessel.worker.bus.get(UUID(run_id))
    assert channel is not None
    got: dict[str, httpx.Response] = {}

    async def read() -> None:
        got["r"] = await api.client.get(f"/runs/{run_id}/events", headers=ALICE)

    with anyio.fail_after(HANG_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            while channel.subscriber_count < 1:
                await anyio.sleep(0.01)
            begin_draining(api.app)
    frames = sse_frames(got["r"].text)
    assert frames and frames[-1]["event"] == "run.parked"
    assert channel.subscriber_count == 0


async def test_a_cursor_from_the_future_is_409_json_not_a_stream(api: Api) -> None:
    run_id, _ = await api.parked_consent()
    channel = api.vessel.worker.bus.get(UUID(run_id))
    assert channel is not None
    before = await api.state()
    ahead = channel.cursor + 5
    response = await api.client.get(
        f"/runs/{run_id}/events", headers={**ALICE, "Last-Event-ID": str(ahead)})
    assert_error(response, 409, "cursor_from_future", "Last-Event-ID",
                 [str(ahead), str(channel.cursor)])
    assert channel.subscriber_count == 0
    assert await api.state() == before


@pytest.mark.parametrize("cursor", ["abc", "-1", "1.5"])
async def test_a_malformed_cursor_is_422(api: Api, cursor: str) -> None:
    run_id, _ = await api.parked_consent()
    response = await api.client.get(
        f"/runs/{run_id}/events", headers={**ALICE, "Last-Event-ID": cursor})
    assert_error(response, 422, "invalid_request", "Last-Event-ID")


async def test_events_of_an_unknown_run_are_404(api: Api) -> None:
    response = await api.client.get(f"/runs/{uuid4()}/events", headers=ALICE)
    assert_error(response, 404, "not_found", "run_id")


# -- errors that are not the caller's --------------------------------------------------------


async def test_an_unexpected_error_is_500_json_without_a_traceback(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(run_id: UUID) -> None:
        raise RuntimeError("disk on fire: secret detail")

    monkeypatch.setattr(api.vessel.deps.ledger, "get_run", broken)
    response = await api.client.get(f"/runs/{uuid4()}", headers=ALICE)
    assert_error(response, 500, "internal")
    assert "secret detail" not in response.text and "RuntimeError" not in response.text
    assert any("disk on fire" in r.getMessage() or r.exc_info for r in caplog.records)


async def test_unknown_routes_and_methods_are_json(api: Api) -> None:
    assert_error(await api.client.get("/nowhere", headers=ALICE), 404, "not_found")
    assert_error(await api.client.delete("/runs", headers=ALICE), 405, "method_not_allowed")


async def test_the_openapi_document_describes_every_route(api: Api) -> None:
    response = await api.client.get("/openapi.json", headers=ALICE)
    assert response.status_code == 200
    doc = response.json()
    assert set(doc["paths"]) == {
        "/runs", "/runs/{run_id}", "/runs/{run_id}/cancel",
        "/consents/{consent_id}/decision", "/runs/{run_id}/events", "/health",
    }
    assert "HTTPBearer" in doc["components"]["securitySchemes"]
    assert "security" not in doc["paths"]["/health"]["get"]
    request = doc["components"]["schemas"]["RunRequest"]
    assert request["additionalProperties"] is False and "sigil" not in request["properties"]
    submit = doc["paths"]["/runs"]["post"]["responses"]
    assert {"200", "201", "409", "422"} <= set(submit)
    events = doc["paths"]["/runs/{run_id}/events"]["get"]["responses"]["200"]
    assert "text/event-stream" in events["content"]


async def test_runs_are_listed_only_under_their_status(api: Api) -> None:
    """Sanity of the fixture: the memory profile really runs the lanes."""
    created = (await api.submit({"pattern": "two_step"})).json()
    assert (await api.wait_status(created["id"], "DONE"))["status"] == RunStatus.DONE.value
