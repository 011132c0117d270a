"""Owner checks and resource limits of the HTTP surface (issue M11, item 5).

A Run is visible only to the principal that admitted it or to one holding the
admin scope; everyone else gets the 404 of an unknown id. Bodies over the
limit get 413, streams past their share 429, a non-loopback Host of a server
without credentials 421, strings PostgreSQL cannot store 422 on every
profile: each with a JSON ErrorBody, and nothing written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import NAMESPACE_OID, UUID, uuid5

import anyio
import httpx
import pytest

from runtime.app.auth import Credentials, CredentialsInvalid, admins_from_env
from runtime.app.factories import vessel_lifespan
from runtime.app.http import AppState, create_app
from runtime.app.limits import HttpLimits, StreamSlots, host_name
from runtime.app.profiles import memory_vessel
from tests.bounds import HANG_S

TOKENS = {"alice": "tok-alice", "bob": "tok-bob", "ops": "tok-ops"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}
OPS = {"Authorization": "Bearer tok-ops"}

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _client(base_url: str = "http://vessel", **kwargs: Any
                  ) -> AsyncIterator[tuple[httpx.AsyncClient, AppState]]:
    creds = kwargs.pop("credentials", Credentials(TOKENS, admins=frozenset({"ops"})))
    app = create_app(vessel_lifespan(memory_vessel()), creds, **kwargs)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            yield client, app.state.vessel


@pytest.fixture
async def served() -> AsyncIterator[tuple[httpx.AsyncClient, AppState]]:
    async for pair in _client(limits=HttpLimits(max_body_bytes=4096, streams_per_run=2,
                                                streams_per_principal=3)):
        yield pair


async def _admit(client: httpx.AsyncClient, pattern: str = "consent_gate") -> str:
    response = await client.post("/runs", json={"pattern": pattern}, headers=ALICE)
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    return run_id


async def _status(client: httpx.AsyncClient, run_id: str) -> str:
    response = await client.get(f"/runs/{run_id}", headers=ALICE)
    status: str = response.json()["status"]
    return status


# -- owner checks -------------------------------------------------------------------------------


async def test_another_principal_cannot_read_stream_or_cancel_a_run(served: Any) -> None:
    client, _ = served
    run_id = await _admit(client)
    for method, path in (("GET", f"/runs/{run_id}"), ("GET", f"/runs/{run_id}/events"),
                         ("POST", f"/runs/{run_id}/cancel")):
        response = await client.request(method, path, headers=BOB)
        assert response.status_code == 404, (path, response.text)
        assert response.json() == {"error": "not_found", "field": "run_id",
                                   "reason": f"Run {run_id} not found"}
    assert await _status(client, run_id) != "CANCELLED"  # bob's cancel wrote nothing


async def test_the_404_for_another_principal_is_the_404_of_an_unknown_id(served: Any) -> None:
    client, _ = served
    run_id = await _admit(client)
    unknown = "00000000-0000-4000-8000-000000000000"
    theirs = (await client.get(f"/runs/{run_id}", headers=BOB)).json()
    missing = (await client.get(f"/runs/{unknown}", headers=BOB)).json()
    assert theirs["error"] == missing["error"] == "not_found"
    assert theirs["reason"].replace(run_id, "X") == missing["reason"].replace(unknown, "X")


async def test_the_admin_scope_reads_and_cancels_any_run(served: Any) -> None:
    client, _ = served
    run_id = await _admit(client)
    assert (await client.get(f"/runs/{run_id}", headers=OPS)).status_code == 200
    cancelled = await client.post(f"/runs/{run_id}/cancel", headers=OPS)
    assert cancelled.status_code in (200, 202)
    with anyio.fail_after(HANG_S):
        while await _status(client, run_id) != "CANCELLED":
            await anyio.sleep(0.02)


async def test_the_owner_still_reads_and_cancels_its_own_run(served: Any) -> None:
    client, _ = served
    run_id = await _admit(client)
    assert (await client.get(f"/runs/{run_id}", headers=ALICE)).status_code == 200
    assert (await client.post(f"/runs/{run_id}/cancel", headers=ALICE)).status_code in (200, 202)


def test_admins_come_from_vessel_admins_and_must_be_known_principals() -> None:
    assert admins_from_env({"VESSEL_ADMINS": " ops , alice,"}) == frozenset({"ops", "alice"})
    with pytest.raises(CredentialsInvalid, match="VESSEL_ADMINS"):
        Credentials(TOKENS, admins=frozenset({"mallory"}))


# -- limits -------------------------------------------------------------------------------------


async def test_a_declared_body_over_the_limit_is_413_and_writes_nothing(served: Any) -> None:
    client, state = served
    before = await state.lifespan.vessel.deps.ledger.dump()
    big = {"pattern": "echo", "prompt": "x" * 5000}
    response = await client.post("/runs", json=big, headers=ALICE)
    assert response.status_code == 413
    assert response.json()["error"] == "too_large" and response.json()["field"] == "body"
    assert await state.lifespan.vessel.deps.ledger.dump() == before


async def test_a_chunked_body_over_the_limit_is_413_without_being_read_whole(served: Any) -> None:
    client, _ = served
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"pattern": "echo", "prompt": "'
        for _ in range(100):
            sent += 1
            yield b"y" * 1024
        yield b'"}'

    response = await client.post("/runs", content=chunks(), headers=ALICE)
    assert response.status_code == 413, response.text
    assert response.json()["error"] == "too_large"
    assert sent < 100  # refused as soon as it passed the limit


async def test_a_body_within_the_limit_is_admitted(served: Any) -> None:
    client, _ = served
    response = await client.post("/runs", json={"pattern": "echo", "prompt": "x" * 1000},
                                 headers=ALICE)
    assert response.status_code == 201


async def test_streams_past_the_share_of_a_run_are_429(served: Any) -> None:
    client, state = served
    run_id = await _admit(client)
    held = [state.streams.acquire(UUID(run_id), "alice") for _ in range(2)]
    assert all(callable(r) for r in held)
    response = await client.get(f"/runs/{run_id}/events", headers=ALICE)
    assert response.status_code == 429
    assert response.json()["error"] == "too_many_streams"
    assert response.headers["Retry-After"] == "5"
    for release in held:
        assert callable(release)
        release()
    assert not state.streams.per_run and not state.streams.per_principal


async def test_a_finished_stream_gives_its_slot_back(served: Any) -> None:
    client, state = served
    run_id = await _admit(client, "echo")
    with anyio.fail_after(HANG_S):
        while await _status(client, run_id) != "DONE":
            await anyio.sleep(0.02)
    for _ in range(5):  # more than the per-run share, one after another
        response = await client.get(f"/runs/{run_id}/events", headers=ALICE)
        assert response.status_code == 200
    assert not state.streams.per_run and not state.streams.per_principal


def test_stream_slots_count_per_run_and_per_principal() -> None:
    slots = StreamSlots(HttpLimits(streams_per_run=2, streams_per_principal=3))
    a, b = uuid5(NAMESPACE_OID, "a"), uuid5(NAMESPACE_OID, "b")
    first = [slots.acquire(a, "p"), slots.acquire(a, "p")]
    assert isinstance(slots.acquire(a, "q"), str)          # the Run's share is full
    third = slots.acquire(b, "p")
    assert callable(third)
    assert "principal 'p'" in str(slots.acquire(b, "p"))   # the principal's share is full
    third()
    third()                                                # releasing twice counts once
    assert callable(slots.acquire(b, "p"))
    assert all(callable(r) for r in first)


async def test_without_credentials_a_non_loopback_host_is_421() -> None:
    async for client, _ in _client("http://evil.example", credentials=None, insecure_local=True):
        response = await client.get("/health")
        assert response.status_code == 421
        assert response.json()["error"] == "misdirected_request"
        assert response.json()["field"] == "Host"
    for base in ("http://localhost:8000", "http://127.0.0.1", "http://[::1]:9"):
        async for client, _ in _client(base, credentials=None, insecure_local=True):
            assert (await client.get("/health")).status_code in (200, 503)


def test_host_names_parse_ports_and_brackets() -> None:
    assert host_name("LOCALHOST:80") == "localhost"
    assert host_name("[::1]:8080") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("127.0.0.1") == "127.0.0.1"


# -- strings no store can hold ----------------------------------------------------------------


@pytest.mark.parametrize("body", [
    b'{"pattern": "echo", "prompt": "a\\ud800b"}',
    b'{"pattern": "echo", "content": {"k": "\\udfff"}}',
    b'{"pattern": "echo", "content": {"\\ud800": 1}}',
    b'{"pattern": "echo", "scopes": ["\\ud800"]}',
    b'{"pattern": "echo", "session": "s\\u0000"}',
])
async def test_lone_surrogates_and_nul_are_422_with_the_field(served: Any, body: bytes) -> None:
    client, state = served
    before = await state.lifespan.vessel.deps.ledger.dump()
    response = await client.post("/runs", content=body,
                                 headers={**ALICE, "Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["field"] in ("prompt", "content", "scopes", "session")
    assert await state.lifespan.vessel.deps.ledger.dump() == before
