"""`vessel jobs work`: the leased-job worker loop (seed 004_85033eb8fc772f12.txt,
"Shutdown and supervision").

    vessel jobs work --workspace W (--dsn DSN | --memory) [--worker-id ID]
                     [--model reference] [--idle SECONDS]
                     [--lease-s 90] [--renew-every-s 20] [--model-deadline-s 45]
                     [--retry-base-s 5] [--model-script STEPS]

The lease and deadline options default to seed 004's values; shorter ones
let real-process tests see leases expire without waiting 90 s. The model
script and `VESSEL_JOBS_CRASH_AT` are test-only faults
(`runtime.adapters.worker_faults`); `VESSEL_CRASH_AT=<point>[:n]` kills the
worker at a catalogued fault point (`job.inference_returned`), as it does
`vessel serve`.

The loop calls `run_once` for the one authorised workspace until SIGINT or
SIGTERM. On the first signal it stops claiming and lets the attempt in
flight finish for at most 10 s; an attempt still running then is cancelled
where it stands, writing nothing more, so its lease (and the model call it
reserved) stays in the store and another worker reclaims the job once the
lease expires.

Exit status, for a supervisor that backs off:
- 0: stopped by a signal;
- 1: a storage failure while working (the database went away, a transaction
  failed): the message is one line on stderr;
- 2: a bad argument or a configuration the worker cannot start with (no or
  both stores, an empty workspace, an unknown model, an unreachable
  database, a schema that is not current): one line on stderr, before any
  claim.

Mounted in `runtime.app.cli` as `cli.add_typer(jobs, name="jobs")`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, NoReturn

import anyio
import psycopg
import typer
from anyio.abc import TaskStatus
from pydantic import ValidationError

from runtime.adapters.crashplan import CrashPlan, CrashPlanInvalid
from runtime.adapters.system import SystemClock, SystemEntropy
from runtime.adapters.worker_faults import (
    ScriptInvalid,
    StoreCrashPlan,
    crashing,
    parse_model_script,
)
from runtime.errors import RuntimeEngineError
from runtime.faults import NoFaults
from runtime.jobs import DEFAULT_POLICY, JobPolicy, JobStore, WorkerContext, run_once
from runtime.jobs.model import ModelClient
from runtime.jobs.models import RENEW_EVERY_S
from runtime.seams import FaultPoints

log = logging.getLogger("vessel.jobs")

DRAIN_S = 10.0
"""Seed 004: after SIGINT/SIGTERM the loop allows up to ten seconds to drain."""
IDLE_S = 1.0
EXIT_STORAGE = 1
EXIT_USAGE = 2
MODELS = ("reference",)

jobs = typer.Typer(
    name="jobs",
    help="Leased job workers (seed 004): claim, interpret and stage preserved evidence.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


class ConfigurationError(Exception):
    """The worker cannot start as configured; reported as one line, exit status 2."""


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"vessel: {message}", err=True)
    raise typer.Exit(code)


# -- the loop ---------------------------------------------------------------------


@dataclass
class LoopReport:
    attempts: int = 0
    """run_once calls that claimed a job and returned its state."""
    abandoned: bool = False
    """An attempt was still running when the drain bound ran out."""


async def _first(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


async def work_loop(
    ctx: WorkerContext,
    stop: anyio.Event,
    *,
    idle_s: float = IDLE_S,
    drain_s: float = DRAIN_S,
    step: Callable[[WorkerContext], Awaitable[object]] = run_once,
) -> LoopReport:
    """Run `step` until `stop` is set, then drain the attempt in flight for at
    most `drain_s`. A failure of `step` (storage) ends the loop and propagates."""
    report = LoopReport()
    finished = anyio.Event()
    failures: list[Exception] = []
    work_scope = anyio.CancelScope()

    async def work() -> None:
        try:
            with work_scope:
                while not stop.is_set():
                    job = await step(ctx)
                    if job is None:
                        with anyio.move_on_after(idle_s):
                            await stop.wait()
                    else:
                        report.attempts += 1
                        log.info("attempt ended: %s", _describe(job))
        except Exception as exc:
            failures.append(exc)
        finally:
            finished.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(work)
        await _first(stop, finished)
        if not finished.is_set():
            log.info("stop requested: no new claims; draining for at most %g s", drain_s)
            with anyio.move_on_after(drain_s):
                await finished.wait()
            if not finished.is_set():
                report.abandoned = True
                log.warning("drain bound reached: the attempt in flight is left to its lease")
                work_scope.cancel()
    if failures:
        raise failures[0]
    return report


def _describe(job: object) -> str:
    state = getattr(job, "state", None)
    return f"job {getattr(job, 'id', '?')} fence {getattr(job, 'fence', '?')} -> {state}"


async def _watch_signals(
    stop: anyio.Event, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        task_status.started()
        async for signum in received:
            log.info("received %s", signal.Signals(signum).name)
            stop.set()


async def serve_worker(ctx: WorkerContext, *, idle_s: float = IDLE_S) -> LoopReport:
    """`work_loop` until SIGINT/SIGTERM."""
    stop = anyio.Event()
    reports: list[LoopReport] = []
    failures: list[Exception] = []
    async with anyio.create_task_group() as tg:
        await tg.start(_watch_signals, stop)  # handlers installed before "ready"
        log.info(
            "worker %s ready: workspace %s, model %s",
            ctx.worker_id,
            ctx.workspace,
            ctx.model.version,
        )
        try:
            reports.append(await work_loop(ctx, stop, idle_s=idle_s))
        except Exception as exc:  # re-raised below, outside the task group
            failures.append(exc)
        tg.cancel_scope.cancel()
    if failures:
        raise failures[0]
    return reports[0]


# -- wiring ---------------------------------------------------------------------------


def make_model(name: str) -> ModelClient:
    if name == "reference":
        from runtime.adapters.reference_model import ReferenceModelClient

        return ReferenceModelClient()
    raise ConfigurationError(f"unknown model {name!r} (known: {', '.join(MODELS)})")


@asynccontextmanager
async def open_store(dsn: str | None) -> AsyncIterator[JobStore]:
    """The memory store, or a PostgreSQL store whose schema is current."""
    if dsn is None:
        from runtime.adapters.memory.jobs_store import MemoryJobStore

        yield MemoryJobStore()
        return
    from runtime.adapters.postgres import ConnectFailed, SchemaVersionError
    from runtime.adapters.postgres.jobs_store import PostgresJobStore

    try:
        store = await PostgresJobStore.connect(dsn)
    except (ConnectFailed, SchemaVersionError) as exc:
        raise ConfigurationError(str(exc)) from None
    except psycopg.Error as exc:
        raise ConfigurationError(f"cannot use the database: {exc}") from None
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{SystemEntropy().new_id().hex[:8]}"


async def run_worker(
    workspace: str,
    dsn: str | None,
    worker_id: str,
    model: ModelClient,
    idle_s: float,
    policy: JobPolicy = DEFAULT_POLICY,
    crash: StoreCrashPlan | None = None,
    faults: FaultPoints | None = None,
) -> LoopReport:
    async with open_store(dsn) as opened:
        if hasattr(opened, "renew_every_s"):  # renewals the store accepts: the worker's period
            opened.renew_every_s = min(policy.renew_every_s, RENEW_EVERY_S)
        store = crashing(opened, crash)
        ctx = WorkerContext(
            store=store,
            model=model,
            policy=policy,
            clock=SystemClock(),
            workspace=workspace,
            worker_id=worker_id,
            scopes=(workspace,),
            entropy=SystemEntropy(),
            faults=faults or NoFaults(),
        )
        return await serve_worker(ctx, idle_s=idle_s)


@jobs.command()
def work(
    workspace: Annotated[
        str, typer.Option("--workspace", help="The one workspace this worker may claim in.")
    ],
    dsn: Annotated[
        str | None,
        typer.Option("--dsn", envvar="VESSEL_DSN", help="PostgreSQL DSN of the job store."),
    ] = None,
    memory: Annotated[
        bool, typer.Option("--memory", help="In-process memory store (nothing durable).")
    ] = False,
    worker_id: Annotated[
        str | None, typer.Option("--worker-id", help="Lease owner name (default host:pid:rand).")
    ] = None,
    model: Annotated[str, typer.Option("--model", help="Model client: reference.")] = "reference",
    idle: Annotated[
        float, typer.Option("--idle", help="Seconds between polls when nothing is eligible.")
    ] = IDLE_S,
    lease_s: Annotated[
        float, typer.Option("--lease-s", help="Lease length of each claim.")
    ] = DEFAULT_POLICY.lease_s,
    renew_every_s: Annotated[
        float, typer.Option("--renew-every-s", help="Lease renewal period during a model call.")
    ] = DEFAULT_POLICY.renew_every_s,
    model_deadline_s: Annotated[
        float, typer.Option("--model-deadline-s", help="Deadline of one model call.")
    ] = DEFAULT_POLICY.model_deadline_s,
    retry_base_s: Annotated[
        float, typer.Option("--retry-base-s", help="First retry delay (doubles per attempt).")
    ] = DEFAULT_POLICY.retry_base_s,
    model_script: Annotated[
        str | None,
        typer.Option("--model-script", hidden=True, help="Test faults: hang,lost,ok,slow:S."),
    ] = None,
) -> None:
    """Claim and process leased jobs of one workspace until SIGINT/SIGTERM."""
    if memory == (dsn is not None):
        _fail("give exactly one of --dsn DSN (PostgreSQL) or --memory", EXIT_USAGE)
    if not workspace.strip() or workspace != workspace.strip():
        _fail(
            f"--workspace must be a non-empty name without surrounding spaces: {workspace!r}",
            EXIT_USAGE,
        )
    if worker_id is not None and not worker_id.strip():
        _fail("--worker-id must not be empty", EXIT_USAGE)
    if not idle > 0:
        _fail(f"--idle must be positive, got {idle:g}", EXIT_USAGE)
    policy = _policy(lease_s, renew_every_s, model_deadline_s, retry_base_s)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        client = make_model(model)
        if model_script:
            client = _scripted(client, model_script)
        crash = StoreCrashPlan.from_env()
        plan = CrashPlan.from_env()
    except (ConfigurationError, ScriptInvalid, CrashPlanInvalid) as exc:
        _fail(str(exc), EXIT_USAGE)
    if crash is not None:
        log.warning("crash plan armed: SIGKILL after JobStore.%s", crash.describe())
    if plan is not None:
        log.warning("crash plan armed: SIGKILL at %s", plan.describe())
    try:
        report = anyio.run(
            run_worker, workspace, dsn, worker_id or default_worker_id(), client, idle, policy,
            crash, plan,
        )
    except ConfigurationError as exc:
        _fail(str(exc), EXIT_USAGE)
    except (RuntimeEngineError, psycopg.Error, OSError) as exc:
        _fail(f"storage failure, stopping: {_one_line(exc)}", EXIT_STORAGE)
    log.info(
        "stopped after %d attempt(s)%s",
        report.attempts,
        "; one attempt left to its lease" if report.abandoned else "",
    )


def _policy(lease_s: float, renew_s: float, deadline_s: float, retry_s: float) -> JobPolicy:
    """Seed 004's policy with the given lease and deadline; exit 2 when they cannot work."""
    if not renew_s < lease_s:
        _fail(f"--renew-every-s ({renew_s:g}) must be shorter than --lease-s ({lease_s:g})",
              EXIT_USAGE)
    try:
        return JobPolicy(lease_s=lease_s, renew_every_s=renew_s, model_deadline_s=deadline_s,
                         retry_base_s=retry_s)
    except ValidationError as exc:
        problems = "; ".join(f"{e['loc'][0]} {e['msg']}" for e in exc.errors())
        _fail(f"invalid lease or deadline: {problems}", EXIT_USAGE)


def _scripted(client: ModelClient, script: str) -> ModelClient:
    """Only the reference model takes a test script."""
    from runtime.adapters.reference_model import ReferenceModelClient

    if not isinstance(client, ReferenceModelClient):
        raise ConfigurationError("--model-script needs --model reference")
    client.script.extend(parse_model_script(script))
    return client


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
