"""Schema-driven fuzzing of the HTTP surface (issue M6, "Bad input").

Schemathesis generates requests from the OpenAPI document of an app on the
memory profile, valid and invalid, for every operation, with and without a
credential. No response may be a 5xx, and every 4xx must be a JSON
ErrorBody (`error`, `reason`), never a traceback. The number of examples per
operation is bounded so the whole module runs in a few seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi as schemathesis_asgi

from runtime.app.factories import memory_lifespan
from runtime.app.http import create_app

TOKEN = "fuzz-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_EXAMPLES = 30


# The document is read without starting anything; schemathesis starts the
# app's lifespan (workers, relays) on its own event-loop thread at the first
# call, and `stop_the_vessel` stops it when the module is done.
APP = create_app(memory_lifespan(concurrency={"runs": 2, "rites": 1}), {"fuzzer": TOKEN})
schema = schemathesis.openapi.from_dict(APP.openapi())
schema.app = APP


@pytest.fixture(scope="module", autouse=True)
def stop_the_vessel() -> Iterator[None]:
    yield
    schemathesis_asgi.shutdown_lifespans()


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_request_makes_the_vessel_answer_5xx(case: Any) -> None:
    for headers in (AUTH, {"Authorization": "Bearer not-the-token"}):
        response = case.call(headers=headers, timeout=10)
        case.validate_response(response, checks=[not_a_server_error])
        if response.status_code >= 400:
            content_type = (response.headers.get("content-type") or [""])[0]
            assert content_type.startswith("application/json"), (
                response.status_code, response.text[:200])
            body = response.json()
            assert body.get("error") and body.get("reason"), body
            assert "Traceback" not in response.text
        if headers is not AUTH and case.path != "/health":
            assert response.status_code == 401, (response.status_code, response.text[:200])
