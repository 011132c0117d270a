"""`vessel`: the production process (DESIGN section 8: `vessel serve`, `vessel migrate`).

Commands:
- `vessel serve [--memory | --dsn DSN] [--host 127.0.0.1] [--port 8000]
  [--migrate] [--insecure-local] [--agents reference | --agents leased
  --workspace W [--agent-model V]]`: the HTTP surface (`runtime.app.http`)
  under uvicorn, with the PostgreSQL + SAQ profile (strict startup) or the
  memory profile (best effort, nothing durable). Binds loopback by default.
  With `--agents leased` (PostgreSQL only) delegated jobs become leased jobs
  of workspace W, executed by a separate `vessel jobs work --workspace W`.
  With `--app module:attribute` the Vessel serves the user's own Patterns
  (`runtime.app.registry_ref`) instead of the shipped ones.
- `vessel migrate --dsn DSN`: applies the shipped migrations, prints the
  versions, exits 0.
- `vessel faults`: the catalogue of named fault points (DESIGN section 5).
- `vessel jobs work --workspace W (--dsn DSN | --memory)`: the leased-job
  worker loop of seed 004 (`runtime.app.jobs_cli`).

Guarantees:
- Every user mistake found before serving (no or both profiles, malformed
  or missing credentials, `--insecure-local` on a non-loopback address, an
  unknown `VESSEL_CRASH_AT` point, an unreachable or malformed DSN, a schema
  that is not current) ends with exit status 2 and one line on stderr, never
  a traceback, and before anything is written or bound.
- SIGTERM or SIGINT during startup cancels the reconciliation pass where it
  stands (it is safe to rerun at any point) and ends the process with one
  line and exit status 0; nothing is served.
- A startup the lifespan refuses (seed 000_81a5c720b14d934a.txt,
  "Cancellation, mutation, and recovery": degraded reconciliation on the
  strict profile) is logged as one line and ends with exit status 1.
- With `VESSEL_CRASH_AT=<point>[:<nth>]` the process SIGKILLs itself at
  that window (`runtime.adapters.crashplan`).
- A shutdown that could not prove every worker task ended (seed 000,
  shutdown paragraph: the lifespan phase is "stuck" and the shared pools
  were left open) writes one line naming what did not stop and ends the
  process at once with exit status 1, without waiting for the live task.
  Any other failed shutdown also ends with exit status 1.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, NoReturn, TypeVar

import anyio
import typer

from runtime.adapters.crashplan import CrashPlan, CrashPlanInvalid
from runtime.adapters.leased_agents import DEFAULT_MODEL_VERSION
from runtime.app.auth import Credentials, CredentialsInvalid, admins_from_env, tokens_from_env
from runtime.app.jobs_cli import jobs as jobs_commands
from runtime.faults import CATALOGUE

T = TypeVar("T")

EXIT_USAGE = 2
EXIT_STARTUP = 1
EXIT_SHUTDOWN = 1
STUCK_GRACE_S = 5.0
STARTUP_POLL_S = 0.1
"""How often a startup in progress looks for a stop signal."""
"""How long a "stuck" shutdown may still take to return before the process exits anyway."""
GRACEFUL_SHUTDOWN_S = 5

cli = typer.Typer(
    name="vessel",
    help="The Vessel run engine: serve the HTTP surface, migrate the ledger.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
cli.add_typer(jobs_commands, name="jobs")  # `vessel jobs work` (runtime.app.jobs_cli)


class UserMistake(Exception):
    """Something the operator can fix; reported as one line, exit status 2."""


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    typer.echo(f"vessel: {message}", err=True)
    raise typer.Exit(code)


def _run(fn: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(fn)


# -- serve ---------------------------------------------------------------------


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _preflight(dsn: str, migrate: bool) -> None:
    """Reach the database and check (or bring) its schema before serving."""
    from runtime.adapters.postgres import (
        ConnectFailed,
        MigrationRefused,
        SchemaVersionError,
    )
    from runtime.adapters.postgres import migrate as migrate_ledger
    from runtime.adapters.postgres.connect import probe
    from runtime.adapters.postgres.migrate import require_current

    try:
        if migrate:
            report = await migrate_ledger(dsn)
            logging.getLogger("vessel").info("%s", _migration_line(report))
        conn = await probe(dsn)
        async with conn:
            await require_current(conn)
    except (ConnectFailed, SchemaVersionError, MigrationRefused) as exc:
        raise UserMistake(str(exc)) from None


def _migration_line(report: object) -> str:
    before, after = getattr(report, "before", 0), getattr(report, "after", 0)
    applied = tuple(getattr(report, "applied", ()))
    if not applied:
        return f"schema version {after} is current; nothing applied"
    listed = ", ".join(f"{v:04d}" for v in applied)
    return f"schema version {before} -> {after} (applied {listed})"


def one_line_error(traceback_text: str, exc: BaseException | None = None) -> str:
    """The error a failed lifespan reports, as one line: the exception's type and
    its whole message (a database error's message often spans several lines,
    and its first line says what failed), never only the traceback's last line.

    Starlette sends the failure from inside its `except` block, so the
    exception itself is usually at hand; otherwise the message is recovered
    from the text after the traceback's last indented (frame) line.
    """
    if exc is not None:
        text = "".join(traceback.format_exception_only(type(exc), exc))
    else:
        lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
        frames = [i for i, line in enumerate(lines) if line[:1].isspace()]
        text = " ".join(lines[frames[-1] + 1:] if frames else lines[-1:]) or traceback_text
    return " ".join(text.split())


class OneLineLifespanErrors:
    """ASGI shim: a failed startup or shutdown is reported to the server as the
    exception's last line instead of Starlette's formatted traceback."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(
        self,
        scope: dict[str, object],
        receive: Callable[[], Awaitable[dict[str, object]]],
        send: Callable[[dict[str, object]], Awaitable[None]],
    ) -> None:
        if scope.get("type") != "lifespan":
            await self.app(scope, receive, send)
            return

        async def shortened(message: dict[str, object]) -> None:
            text = message.get("message")
            if str(message.get("type", "")).endswith(".failed") and isinstance(text, str):
                message = {**message, "message": one_line_error(text, sys.exc_info()[1])}
            await send(message)

        await self.app(scope, receive, shortened)


@cli.command()
def serve(
    memory: Annotated[bool, typer.Option("--memory", help="In-process memory profile.")] = False,
    dsn: Annotated[
        str | None,
        typer.Option("--dsn", envvar="VESSEL_DSN", help="PostgreSQL DSN (ledger and SAQ)."),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to bind.")] = 8000,
    migrate: Annotated[bool, typer.Option("--migrate", help="Migrate before serving.")] = False,
    insecure_local: Annotated[
        bool,
        typer.Option("--insecure-local", help="Serve without credentials (loopback only)."),
    ] = False,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    agents: Annotated[
        str,
        typer.Option(
            "--agents",
            help="Delegated jobs: reference (in process) or leased (vessel jobs work).",
        ),
    ] = "reference",
    workspace: Annotated[
        str | None,
        typer.Option("--workspace", help="With --agents leased: the workers' workspace."),
    ] = None,
    agent_model: Annotated[
        str,
        typer.Option("--agent-model", help="With --agents leased: the model version required."),
    ] = DEFAULT_MODEL_VERSION,
    services: Annotated[
        str,
        typer.Option("--services", help="Service waits: reference (a reference provider; "
                     "durable in the database with --dsn) or none (such Runs fail)."),
    ] = "reference",
    app_ref: Annotated[
        str | None,
        typer.Option("--app", help="Serve your own Patterns instead of the shipped ones: "
                     "module:attribute naming a WorkflowRegistry, or an object with "
                     "serve_registry() or a registry attribute (a harness.api.App)."),
    ] = None,
) -> None:
    """Serve the Vessel's HTTP surface with its workers and relays."""
    from runtime.app.factories import memory_lifespan, postgres_lifespan
    from runtime.app.http import create_app
    from runtime.app.profiles import LeasedAgents

    if memory == (dsn is not None):
        fail("give exactly one of --dsn DSN (PostgreSQL) or --memory")
    if memory and migrate:
        fail("--migrate needs --dsn: the memory profile has no schema")
    if insecure_local and not _loopback(host):
        fail(f"--insecure-local serves without credentials and may only bind loopback, "
             f"not {host}")
    leased: LeasedAgents | None = None
    if agents == "leased":
        if dsn is None:
            fail("--agents leased needs --dsn: the leased job store is PostgreSQL")
        if workspace is None or not workspace.strip() or workspace != workspace.strip():
            fail(f"--agents leased needs --workspace, a non-empty name without surrounding "
                 f"spaces (got {workspace!r})")
        if not agent_model.strip():
            fail("--agent-model must not be empty")
        leased = LeasedAgents(workspace=workspace, model_version=agent_model)
    elif agents != "reference":
        fail(f"--agents must be reference or leased, not {agents!r}")
    elif workspace is not None:
        fail("--workspace applies only to --agents leased")
    if services not in ("reference", "none"):
        fail(f"--services must be reference or none, not {services!r}")
    try:
        creds = Credentials(tokens_from_env(), insecure_local=insecure_local,
                            admins=admins_from_env())
        plan = CrashPlan.from_env()
    except (CredentialsInvalid, CrashPlanInvalid) as exc:
        fail(str(exc))
    registry = None
    if app_ref is not None:
        from runtime.app.registry_ref import RegistryRefError, load_registry

        try:
            registry = load_registry(app_ref)
        except RegistryRefError as exc:
            fail(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("vessel")
    if plan is not None:
        log.warning("crash plan armed: SIGKILL at %s", plan.describe())
    if dsn is not None:
        try:
            _run(lambda: _preflight(dsn, migrate))
        except UserMistake as exc:
            fail(str(exc))
        factory = postgres_lifespan(dsn, faults=plan, agents=leased,
                                    services=services == "reference", registry=registry)
        if leased is not None:
            log.info("delegated jobs: leased jobs of workspace %s (model %s)",
                     leased.workspace, leased.model_version)
        profile = "postgres"
    else:
        factory = memory_lifespan(faults=plan, services=services == "reference",
                                  registry=registry)
        profile = "memory"
    if registry is not None:
        log.info("serving the Patterns of --app %s: %s", app_ref, ", ".join(registry.names()))
    app = create_app(factory, creds, profile=profile)
    run_server(app, host=host, port=port, log_level=log_level)


def run_server(app: Any, *, host: str, port: int, log_level: str = "info") -> None:
    """Serve `app` under uvicorn until it is told to stop, then end as documented.

    Startup failure: exit status 1 (`typer.Exit`). An unproved worker stop:
    one line and an immediate exit with EXIT_SHUTDOWN (`exit_if_stop_unproven`).
    Any other failed shutdown: exit status 1 (`typer.Exit`).
    """
    import uvicorn

    from runtime.app.http import begin_draining

    config = uvicorn.Config(
        OneLineLifespanErrors(app),
        host=host,
        port=port,
        lifespan="on",
        log_level=log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            # uvicorn's signal handler only sets should_exit; a watcher turns it
            # into an interrupt of the startup still running (issue 15).
            refused: SystemExit | None = None
            async with anyio.create_task_group() as watcher:
                watcher.start_soon(interrupt_on_signal, self, app)
                try:
                    await super().startup(sockets=sockets)
                except SystemExit as exc:  # uvicorn's refused startup, raised ungrouped
                    refused = exc
                finally:
                    watcher.cancel_scope.cancel()
            if refused is not None:
                raise refused

        async def shutdown(self, sockets: Any = None) -> None:
            begin_draining(app)  # open event streams end instead of holding shutdown
            async with anyio.create_task_group() as watchdog:
                watchdog.start_soon(exit_when_stuck, app)
                await super().shutdown(sockets=sockets)
                watchdog.cancel_scope.cancel()
            exit_if_stop_unproven(app)

    server = Server(config)
    try:
        server.run()
    except SystemExit as exc:
        # uvicorn exits 3 when the lifespan refuses startup or the port cannot
        # be bound; this CLI documents exit status 1 for a refused startup.
        if exc.code in (0, None):
            raise
        if server.should_exit and not server.started and _lifespan_phase(app) == "interrupted":
            typer.echo("vessel: stopped by a signal during startup; nothing was served",
                       err=True)
            raise typer.Exit(0) from None
        fail("startup failed (see the log above)", EXIT_STARTUP)
    if not server.started:
        fail("startup failed (see the log above)", EXIT_STARTUP)
    if getattr(getattr(server, "lifespan", None), "shutdown_failed", False):
        fail("shutdown failed (see the log above)", EXIT_SHUTDOWN)


async def interrupt_on_signal(server: Any, app: Any, every_s: float = STARTUP_POLL_S) -> None:
    """Interrupt the lifespan's startup once the server was told to exit."""
    from runtime.app.http import interrupt_startup

    while not server.should_exit:
        await anyio.sleep(every_s)
    interrupt_startup(app)


async def exit_when_stuck(
    app: Any,
    grace_s: float = STUCK_GRACE_S,
    exit_now: Callable[[int], object] = os._exit,
) -> None:
    """Exit as `exit_if_stop_unproven` does once the lifespan has been "stuck" for `grace_s`.

    For a part that never ends at all: the lifespan has already raised its
    verdict, but its task group still waits for that part, so the shutdown
    would never return to `exit_if_stop_unproven`.
    """
    while _lifespan_phase(app) != "stuck":
        await anyio.sleep(0.1)
    await anyio.sleep(grace_s)
    exit_if_stop_unproven(app, exit_now)


def _lifespan_phase(app: Any) -> str | None:
    life = getattr(getattr(app.state, "vessel", None), "lifespan", None)
    status = getattr(life, "status", None)
    return None if status is None else str(status.phase)


def exit_if_stop_unproven(app: Any, exit_now: Callable[[int], object] = os._exit) -> None:
    """End the process now when the lifespan could not prove its workers stopped.

    A worker task that outlived its stop may still be running, on pools the
    profile deliberately left open. Returning would hand the process to
    uvicorn's and asyncio's exit: a captured SIGTERM is re-raised and kills
    the process without a word on what did not stop, and asyncio's exit
    (after SIGINT) cancels every task and waits for it, for ever for a task
    that ignores cancellation. So one line says what did not stop, the logs
    are flushed, and the process exits with EXIT_SHUTDOWN; the next boot's
    reconciliation recovers the Run the task held, as after any process
    death.
    """
    life = getattr(getattr(app.state, "vessel", None), "lifespan", None)
    status = getattr(life, "status", None)
    if status is None or status.phase != "stuck":
        return
    reason = status.shutdown_error or "a worker or relay did not stop"
    typer.echo(f"vessel: {reason}; exiting with status {EXIT_SHUTDOWN} without waiting "
               f"for the live task", err=True)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    exit_now(EXIT_SHUTDOWN)


# -- migrate -------------------------------------------------------------------


@cli.command("migrate")
def migrate_command(
    dsn: Annotated[
        str | None, typer.Option("--dsn", envvar="VESSEL_DSN", help="PostgreSQL DSN.")
    ] = None,
) -> None:
    """Apply the shipped ledger migrations and print the schema versions."""
    from runtime.adapters.postgres import (
        ConnectFailed,
        MigrationRefused,
        SchemaTooNew,
        migrate,
    )

    if not dsn:
        fail("give --dsn DSN (or set VESSEL_DSN)")
    try:
        report = _run(lambda: migrate(dsn))
    except (ConnectFailed, SchemaTooNew) as exc:
        fail(str(exc))
    except MigrationRefused as exc:
        fail(str(exc), 1)
    typer.echo(_migration_line(report))


# -- faults --------------------------------------------------------------------


@cli.command()
def faults(
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table.")] = False,
) -> None:
    """List the named fault points (crash windows) and the recovery each expects."""
    points = [CATALOGUE[name] for name in sorted(CATALOGUE)]
    if as_json:
        rows = [{"name": p.name, "window": p.window, "expected": p.expected} for p in points]
        typer.echo(json.dumps(rows, indent=2))
        return
    width = max(len(p.name) for p in points)
    for p in points:
        typer.echo(f"{p.name:<{width}}  {p.window}")
        typer.echo(f"{'':<{width}}  -> {p.expected}")


def main(argv: list[str] | None = None) -> None:
    """Console entry point (`vessel = runtime.app.cli:main`).

    A command-line usage mistake (no command, unknown command or option,
    malformed value) is one line on stderr and exit status 2, like every
    other user mistake (`runtime.app.usage`).
    """
    from runtime.app import usage

    sys.exit(usage.run(cli, "vessel", argv, prefix="vessel: "))


if __name__ == "__main__":
    main()
