"""The Vessel's HTTP surface: a FastAPI application factory.

`create_app(lifespan_factory, credentials)` builds the application; its ASGI
lifespan enters `lifespan_factory()` (the profile connects: ledger, queues)
and then `Lifespan.serving()` (startup reconciliation, workers, relays; seed
000_81a5c720b14d934a.txt, "Topology and limits" and "Cancellation,
mutation, and recovery"), serves, and on shutdown leaves both in reverse
order. A strict profile whose reconciliation is degraded therefore never
serves a request.

Routes (every one but `/health` needs `Authorization: Bearer <token>`; the
principal comes from the token, see `runtime.app.auth`):

- `POST /runs`: admit a `RunRequest` through `RunEngine.submit`, the sole
  admission path (seed 000, "Admission and exact claim"). The
  `Idempotency-Key` header becomes the Intent's key, scoped by the principal.
  201 a new Run, 200 an idempotent replay, 409 the key reused for different
  work or the session busy, 422 invalid input.
- `GET /runs/{id}`: the Run as the ledger holds it.
- Owner checks: reading, streaming and cancelling a Run need the principal
  that admitted it, or the admin scope (`VESSEL_ADMINS`); anyone else gets
  the same 404 as for a Run that does not exist, so ids reveal nothing.
- `POST /runs/{id}/cancel`: the Lifespan's Canceller (seed 000,
  "Cancellation, mutation, and recovery"): 202 while honestly CANCELLING,
  200 once CANCELLED or when the Run had already ended.
- `POST /consents/{id}/decision` `{"approve": bool}`: a verdict by the
  credential's principal, who must own the consent (403 otherwise); 409 when
  it was already decided otherwise or cancelled.
- `GET /runs/{id}/events`: server-sent events (`runtime.app.sse`), resuming
  after `Last-Event-ID`; a cursor from the future is a 409, not a stream;
  429 when the Run or the principal already holds its share of open streams.
- `GET /health`: phase, boot id, degraded reasons, queue and relay status;
  200 when ready, else 503.

Guarantees:
- Every 4xx and 5xx body is a JSON `ErrorBody` (`error`, `field`, `reason`);
  no traceback reaches a client. Unexpected errors are logged here and
  answered 500.
- Limits (`runtime.app.limits`): request bodies over the limit get 413,
  too many open event streams 429, and without credentials a Host that is
  not loopback 421.
- Every refusal happens before the ledger is written: authentication runs
  before the body is read, request models and the Pattern's state model
  are checked before `submit`, and the engine itself writes nothing for the
  refusals it makes (idempotency conflict, busy session, unknown Pattern).
- The OpenAPI document (`/openapi.json`, behind the same credential)
  describes every route, its request and response models and error codes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

from fastapi import Depends, FastAPI, Header, Request, Response, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runtime.app.auth import Credentials
from runtime.app.auth import credentials as normalise_credentials
from runtime.app.lifespan import Lifespan
from runtime.app.limits import BodyLimit, HttpLimits, LoopbackHostOnly, StreamSlots
from runtime.app.schemas import (
    CREDENTIAL_FIELDS,
    MAX_IDEMPOTENCY_KEY,
    ConsentDecision,
    ConsentView,
    ErrorBody,
    ErrorDetail,
    HealthView,
    QueueStatus,
    RunRequest,
    RunView,
)
from runtime.app.sse import RunEventStream, open_events
from runtime.engine import idempotent_run_id
from runtime.errors import (
    HeldWithoutOwner,
    IdempotencyConflict,
    InvalidIntent,
    LedgerUnavailable,
    NotFound,
    RuntimeEngineError,
    SessionBusy,
    UnknownPattern,
)
from runtime.events.errors import CapacityExceeded, CursorFromFuture, InvalidCursor
from runtime.models import Intent, Run
from runtime.stasis.consent import ConsentRefused, decide

log = logging.getLogger(__name__)

LifespanFactory = Callable[[], AbstractAsyncContextManager[Lifespan]]
"""Opens one profile (ledger, broker) and yields its Lifespan; closes it on exit."""

SOURCE = "http"
PRINCIPAL_KEY = "vessel.principal"
UNAUTHENTICATED = frozenset({"/health"})
HEADER_NAMES = {
    "idempotency-key": "Idempotency-Key",
    "last-event-id": "Last-Event-ID",
    "authorization": "Authorization",
}
MAX_CURSOR = 2**63 - 1


class ApiError(Exception):
    """A refusal answered with an ErrorBody."""

    def __init__(
        self,
        status: int,
        error: str,
        reason: str,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.body = ErrorBody(error=error, field=field, reason=reason)
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        return error_response(self.status, self.body, self.headers)


def error_response(
    status: int, body: ErrorBody, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True), status_code=status, headers=headers
    )


class EventStream(StreamingResponse):
    media_type = "text/event-stream"
    release: Callable[[], None] | None = None
    """Gives back the stream's slot when the response ends, however it ends."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.release is not None:
                self.release()


SSE_DESCRIPTION = (
    "Server-sent events: `id` is the channel cursor, `event` the kind, `data` the event as "
    "JSON (`run_id`, `cursor`, `kind`, `data`). `resync` events are boundaries whose "
    "`data.snapshot` replaces everything through their cursor."
)
SSE_ITEM: dict[str, Any] = {
    "type": "object",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string"},
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ErrorBody} for status in statuses}


@dataclass
class AppState:
    profile: str
    creds: Credentials
    streams: StreamSlots
    lifespan: Lifespan | None = None
    draining: bool = False
    """Set when the server begins shutting down: event streams end at once
    instead of holding the server's graceful-shutdown window open."""
    stop_requested: bool = False
    """Set by `interrupt_startup`: a lifespan not yet built refuses to start."""


def begin_draining(app: FastAPI) -> None:
    """The server is shutting down: end open event streams (within TICK_S)."""
    state = app.state.vessel
    if isinstance(state, AppState):
        state.draining = True


def interrupt_startup(app: FastAPI) -> None:
    """A stop was requested before startup completed (issue 15: startup answers
    SIGTERM): a running reconciliation is cancelled and a lifespan still being
    built refuses to start. Call it on the event loop's thread."""
    state = app.state.vessel
    if not isinstance(state, AppState):
        return
    state.stop_requested = True
    if state.lifespan is not None:
        state.lifespan.interrupt()


# -- errors -------------------------------------------------------------------


def engine_error(exc: RuntimeEngineError) -> ApiError:
    """The HTTP answer to an error the engine raised on purpose."""
    if isinstance(exc, UnknownPattern):
        return ApiError(422, "unknown_pattern", exc.reason, "pattern")
    if isinstance(exc, InvalidIntent):
        return ApiError(422, "invalid_intent", exc.reason, exc.field)
    if isinstance(exc, IdempotencyConflict):
        return ApiError(409, "idempotency_conflict", str(exc), "Idempotency-Key")
    if isinstance(exc, SessionBusy):
        return ApiError(409, "session_busy", str(exc), "session")
    if isinstance(exc, HeldWithoutOwner):
        return ApiError(409, "held_without_owner", str(exc), "Idempotency-Key")
    if isinstance(exc, NotFound):
        return ApiError(404, "not_found", str(exc), _id_field(exc.what))
    if isinstance(exc, ConsentRefused):
        return ApiError(409, "consent_refused", exc.reason, "consent_id")
    if isinstance(exc, CursorFromFuture):
        return ApiError(409, "cursor_from_future", str(exc), "Last-Event-ID")
    if isinstance(exc, InvalidCursor):
        return ApiError(422, "invalid_cursor", str(exc), "Last-Event-ID")
    if isinstance(exc, CapacityExceeded):
        return ApiError(503, "capacity_exceeded", str(exc))
    if isinstance(exc, LedgerUnavailable):
        return ApiError(503, "ledger_unavailable", str(exc))
    log.error("unmapped engine error: %r", exc)
    return ApiError(500, "internal", "internal server error; see the server log")


def _id_field(what: str) -> str:
    return {"Run": "run_id", "consent": "consent_id"}.get(what, "id")


def field_name(loc: Sequence[int | str], kind: str) -> str:
    """A validation location as the caller wrote it: body field path, header name."""
    parts = list(loc)
    source = parts.pop(0) if parts and parts[0] in ("body", "query", "path", "header") else None
    if source == "header" and parts:
        return HEADER_NAMES.get(str(parts[0]).lower(), str(parts[0]))
    if source == "body" and (not parts or kind == "json_invalid"):
        return "body"
    return ".".join(str(p) for p in parts) or "body"


def validation_reason(error: Mapping[str, Any], name: str) -> str:
    kind = str(error.get("type", ""))
    if kind == "json_invalid":
        detail = (error.get("ctx") or {}).get("error", "")
        return f"malformed JSON: {detail}" if detail else "malformed JSON"
    if kind == "extra_forbidden":
        return CREDENTIAL_FIELDS.get(name, "unknown field: not part of this request")
    message = str(error.get("msg", "invalid"))
    return message.removeprefix("Value error, ")


def validation_body(errors: Sequence[Mapping[str, Any]], prefix: str = "") -> ErrorBody:
    details = []
    for error in errors:
        name = field_name(tuple(error.get("loc", ())), str(error.get("type", "")))
        if prefix:
            name = f"{prefix}.{name}" if name != "body" else prefix
        details.append(ErrorDetail(field=name, reason=validation_reason(error, name)))
    first = details[0] if details else ErrorDetail(field="body", reason="invalid request")
    code = "malformed_json" if errors and errors[0].get("type") == "json_invalid" else (
        "invalid_request"
    )
    return ErrorBody(
        error=code,
        field=first.field,
        reason=first.reason,
        details=details if len(details) > 1 else None,
    )


STATUS_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 406: "not_acceptable", 413: "too_large",
    415: "unsupported_media_type", 421: "misdirected_request", 429: "too_many_requests",
}


# -- middleware ------------------------------------------------------------------


class CatchAll:
    """Outermost: an unexpected error becomes a 500 ErrorBody; its traceback
    goes to the server log only. Nothing is re-raised to the server."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception:
            log.exception("unhandled error serving %s %s", scope.get("method"), scope.get("path"))
            if started:
                return  # a stream already began: the connection just ends
            body = ErrorBody(error="internal", reason="internal server error; see the server log")
            await error_response(500, body)(scope, receive, send)


class BearerAuth:
    """Authenticates before anything reads the request; `/health` is public."""

    def __init__(self, app: ASGIApp, creds: Credentials) -> None:
        self.app = app
        self.creds = creds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in UNAUTHENTICATED:
            await self.app(scope, receive, send)
            return
        token, problem = _bearer(scope)
        principal = self.creds.principal_for(token)
        if principal is None:
            reason = problem or "the bearer token is not valid"
            error = ApiError(401, "unauthorized", reason, "Authorization",
                             {"WWW-Authenticate": 'Bearer realm="vessel"'})
            await error.response()(scope, receive, send)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)


def _bearer(scope: Scope) -> tuple[str | None, str | None]:
    values = [v for k, v in scope.get("headers", []) if k.lower() == b"authorization"]
    if not values:
        return None, "missing Authorization: Bearer <token> header"
    if len(values) > 1:
        return None, "more than one Authorization header"
    scheme, _, token = values[0].decode("latin-1").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None, "Authorization must be 'Bearer <token>'"
    return token.strip(), None


# -- the application -------------------------------------------------------------


def create_app(
    lifespan_factory: LifespanFactory,
    credentials: Credentials | Mapping[str, str] | str | None = None,
    *,
    insecure_local: bool = False,
    profile: str = "memory",
    title: str = "Vessel",
    limits: HttpLimits | None = None,
) -> FastAPI:
    """The Vessel application; raises CredentialsInvalid without credentials
    unless `insecure_local`."""
    creds = normalise_credentials(credentials, insecure_local=insecure_local)
    limits = limits or HttpLimits()
    state = AppState(profile=profile, creds=creds, streams=StreamSlots(limits))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with lifespan_factory() as vessel_lifespan:
            state.lifespan = vessel_lifespan
            if state.stop_requested:
                vessel_lifespan.interrupt()
            async with vessel_lifespan.serving():
                log.info("%s ready (boot %s, profile %s)", title,
                         vessel_lifespan.status.boot_id, profile)
                yield

    app = FastAPI(
        title=title,
        version="0.1.0",
        description="The Vessel run engine: durable Runs, consents, cancellation, events.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.vessel = state
    app.add_middleware(BearerAuth, creds=creds)
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    if not creds.enforced:
        app.add_middleware(LoopbackHostOnly)
    app.add_middleware(CatchAll)
    _install_handlers(app)
    _install_routes(app, state)
    return app


def _install_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return exc.response()

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(422, validation_body(list(exc.errors())))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = STATUS_CODES.get(exc.status_code, f"http_{exc.status_code}")
        body = ErrorBody(error=code, reason=str(exc.detail))
        return error_response(exc.status_code, body, exc.headers)

    async def engine(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RuntimeEngineError)
        return engine_error(exc).response()

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RuntimeEngineError, engine)


bearer = HTTPBearer(auto_error=False, description="Bearer token naming the principal")


def principal(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> str:
    """The authenticated principal (BearerAuth set it before the route ran)."""
    who = request.scope.get(PRINCIPAL_KEY)
    if not isinstance(who, str):  # BearerAuth always sets it; never trust its absence
        raise ApiError(401, "unauthorized", "no authenticated principal", "Authorization")
    return who


def serving(request: Request) -> Lifespan:
    """The Lifespan, only while it is ready; 503 otherwise."""
    state = request.app.state.vessel
    life = state.lifespan if isinstance(state, AppState) else None
    if life is None or life.status.phase != "ready":
        phase = "starting" if life is None else life.status.phase
        raise ApiError(503, "not_ready", f"the Vessel is {phase}, not serving")
    return life


Principal = Annotated[str, Depends(principal)]
Serving = Annotated[Lifespan, Depends(serving)]


def _install_routes(app: FastAPI, state: AppState) -> None:
    @app.post(
        "/runs",
        status_code=201,
        response_model=RunView,
        summary="Admit a Run",
        responses={200: {"model": RunView, "description": "Idempotent replay of an admitted Run"},
                   **_errors(401, 409, 413, 422, 503)},
    )
    async def submit_run(
        body: RunRequest,
        response: Response,
        who: Principal,
        life: Serving,
        idempotency_key: Annotated[
            str | None,
            Header(alias="Idempotency-Key", min_length=1, max_length=MAX_IDEMPOTENCY_KEY,
                   description="Scoped by the principal: the same key returns the same Run"),
        ] = None,
    ) -> RunView:
        intent = _intent(body, who, idempotency_key)
        await _precheck(life, intent)
        submission = await life.vessel.engine.submit(intent)
        response.status_code = 201 if submission.created else 200
        response.headers["Location"] = f"/runs/{submission.run.id}"
        return RunView.of(submission.run)

    @app.get("/runs/{run_id}", response_model=RunView, summary="Read a Run",
             responses=_errors(401, 404, 422, 503))
    async def get_run(run_id: UUID, who: Principal, life: Serving) -> RunView:
        return RunView.of(await _accessible_run(state, life, run_id, who))

    @app.post(
        "/runs/{run_id}/cancel",
        response_model=RunView,
        summary="Cancel a Run",
        responses={202: {"model": RunView, "description": "CANCELLING: containment pending"},
                   **_errors(401, 404, 422, 503)},
    )
    async def cancel_run(run_id: UUID, response: Response, who: Principal,
                         life: Serving) -> RunView:
        await _accessible_run(state, life, run_id, who)  # nothing is written for another's Run
        run = await life.canceller.cancel(run_id)
        response.status_code = 200 if run.status.terminal else 202
        return RunView.of(run)

    @app.post(
        "/consents/{consent_id}/decision",
        response_model=ConsentView,
        summary="Decide a consent",
        responses=_errors(401, 403, 404, 409, 422, 503),
    )
    async def decide_consent(
        consent_id: UUID, body: ConsentDecision, who: Principal, life: Serving
    ) -> ConsentView:
        consent = await life.vessel.deps.ledger.get_consent(consent_id)
        if consent is None:
            raise ApiError(404, "not_found", f"consent {consent_id} not found", "consent_id")
        if consent.owner != who:
            raise ApiError(403, "forbidden",
                           f"principal {who!r} does not own consent {consent_id}", "consent_id")
        decided = await decide(life.vessel.engine, consent_id, body.approve, who)
        return ConsentView.of(decided)

    @app.get(
        "/runs/{run_id}/events",
        response_class=EventStream,
        summary="Stream a Run's events (server-sent events)",
        responses={200: {"description": SSE_DESCRIPTION,
                         "content": {"text/event-stream": {"itemSchema": SSE_ITEM}}},
                   **_errors(401, 404, 409, 422, 429, 503)},
    )
    async def run_events(
        run_id: UUID,
        who: Principal,
        life: Serving,
        last_event_id: Annotated[
            int | None,
            Header(alias="Last-Event-ID", ge=0, le=MAX_CURSOR,
                   description="Resume after this cursor"),
        ] = None,
    ) -> Response:
        ledger, bus = life.vessel.deps.ledger, life.vessel.worker.bus
        await _accessible_run(state, life, run_id, who)
        release = state.streams.acquire(run_id, who)
        if isinstance(release, str):
            raise ApiError(429, "too_many_streams", release, headers={"Retry-After": "5"})
        try:
            subscription = open_events(bus, run_id, last_event_id or 0)
        except BaseException:
            release()
            raise
        stream = RunEventStream(
            bus, ledger, run_id, subscription,
            serving=lambda: life.status.phase == "ready" and not state.draining,
        )
        response = EventStream(
            stream.frames(), headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        response.release = release
        return response

    @app.get("/health", response_model=HealthView, summary="Startup state (no credential)",
             responses={503: {"model": HealthView, "description": "Not serving"}})
    async def health(response: Response) -> HealthView:
        view = _health(state)
        response.status_code = 200 if view.ready else 503
        return view


async def _accessible_run(state: AppState, life: Lifespan, run_id: UUID, who: str) -> Run:
    """The Run, if `who` admitted it or holds the admin scope; else the 404 an
    unknown id gets, so another principal's Run ids reveal nothing."""
    run = await life.vessel.deps.ledger.get_run(run_id)
    if run is None or not state.creds.may_access(who, run.intent.sigil):
        raise ApiError(404, "not_found", f"Run {run_id} not found", "run_id")
    return run


def _intent(body: RunRequest, who: str, key: str | None) -> Intent:
    try:
        return Intent(
            pattern=body.pattern,
            prompt=body.prompt,
            source=SOURCE,
            sigil=who,
            scopes=tuple(body.scopes),
            content=body.content,
            session=body.session,
            priority=body.priority,
            idempotency_key=key,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        name = "Idempotency-Key" if error["loc"] == ("idempotency_key",) else field_name(
            tuple(error["loc"]), error["type"])
        raise ApiError(422, "invalid_request", validation_reason(dict(error), name),
                       name) from None


async def _precheck(life: Lifespan, intent: Intent) -> None:
    """Refuse an unknown Pattern or content its state model rejects, before
    anything is written. A replay of an admitted key is left to the engine,
    which answers it from the ledger without consulting the current registry
    (seed 000, "Admission and exact claim")."""
    run_id = idempotent_run_id(intent)
    if run_id is not None and await life.vessel.deps.ledger.get_run(run_id) is not None:
        return
    pattern = life.vessel.registry.latest(intent.pattern)
    try:
        pattern.initial_state(intent.content)
    except ValidationError as exc:
        body = validation_body(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()], prefix="content"
        )
        raise ApiError(422, "invalid_content", body.reason, body.field) from None


def _health(state: AppState) -> HealthView:
    life = state.lifespan
    if life is None:
        return HealthView(
            phase="starting", ready=False, boot_id="", profile=state.profile, strict=False,
            degraded=[], queues={}, broker_connected=False, relay_restarts=0,
        )
    status = life.status
    broker = life.vessel.deps.broker
    return HealthView(
        phase=status.phase,
        ready=status.phase == "ready",
        boot_id=status.boot_id,
        profile=state.profile,
        strict=life.strict,
        degraded=list(status.degraded),
        queues={name: QueueStatus(concurrency=n)
                for name, n in sorted(life.vessel.lanes.concurrency.items())},
        broker_connected=bool(getattr(broker, "connected", True)),
        relay_restarts=status.relay_restarts,
    )


def openapi_json(app: FastAPI) -> str:
    """The OpenAPI document, canonical JSON (for snapshots and tools)."""
    return json.dumps(app.openapi(), sort_keys=True, indent=2)


__all__ = [
    "ApiError", "AppState", "LifespanFactory", "begin_draining", "create_app",
    "interrupt_startup", "openapi_json",
]
