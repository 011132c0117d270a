"""`harness`: campaigns, replay, shrink, and the catalogues (DESIGN section 8).

Exit codes: 0 every invariant held, 1 a violation, 2 a usage or environment
error (one line on stderr, never a traceback). Every failure prints the
exact command that replays it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from harness import report as reports
from harness import usage
from harness.progress import DEFAULT_EVERY_S, Progress

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Fault campaigns, replays and shrinks for the Vessel run engine.",
)
out = Console()
err = Console(stderr=True)


class UsageError(Exception):
    """A user's mistake: reported in one line, exit 2."""


def say(text: str) -> None:
    """Plain output: no markup, no highlighting, never wrapped (commands stay copyable)."""
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def _die(message: str) -> NoReturn:
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _break_prefix() -> str:
    from sim import breaks

    name = breaks.from_env()
    return f"{breaks.ENV}={name} " if name else ""


def replay_command(seed: int, scenario: str, profile: str, plan: Path | None = None) -> str:
    how = f"--plan {plan}" if plan else f"--profile {profile}"
    return f"{_break_prefix()}harness replay --seed {seed} --scenario {scenario} {how}"


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        _die(f"{name} must be an integer, got {value!r}")


def _profile(profile: str) -> str:
    from sim.faults.options import PROFILES

    if profile not in PROFILES:
        _die(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")
    return profile


def _scenarios(spec: str) -> list[str]:
    from sim.scenarios import resolve

    try:
        return [s.name for s in resolve(spec)]
    except KeyError as exc:
        _die(str(exc.args[0]))


def _one_scenario(spec: str) -> str:
    """replay and shrink work on one seed of one scenario: `all` and lists are refused."""
    names = _scenarios("all")
    if spec.strip() == "all" or "," in spec:
        _die(f"--scenario takes one scenario, not {spec!r}; choose one of {', '.join(names)}")
    return _scenarios(spec)[0]


def _load_plan(path: Path) -> Any:
    from pydantic import ValidationError

    from sim.faults.plan import FaultPlan

    try:
        return FaultPlan.load(path)
    except FileNotFoundError:
        _die(f"plan file {path} does not exist")
    except (ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        _die(f"plan file {path} is not a valid fault plan: {first}")



AppRef = Annotated[str | None, typer.Option(
    "--app", help="your application instead of a scenario: module:attribute naming a "
                  "harness.api.App (docs/api.md)")]


def _app(ref: str, scenario: str | None) -> Any:
    """The App `--app` names, built once to check it; any mistake is one line, exit 2."""
    from harness.api import AppError, check_app, load_app

    if scenario is not None:
        _die("--app and --scenario exclude each other: an app brings its own workload")
    try:
        loaded = load_app(ref)
        check_app(loaded)
    except AppError as exc:
        _die(str(exc))
    except Exception as exc:
        _die(f"--app {ref!r}: building the app raised {type(exc).__name__}: "
             f"{' '.join(str(exc).split())}")
    return loaded


def _one_seed(seed: str, scenario: str | None, app_ref: str | None, profile: str,
              plan: Path | None) -> tuple[int, Any, str, Any]:
    """What replay and shrink take: the seed, the --app target (None for a scenario),
    the scenario's or app's name and the --plan loaded, checked in that order (a usage
    error is one line, exit 2)."""
    n = _int(seed, "--seed")
    target = _app(app_ref, scenario) if app_ref is not None else None
    name = target.name if target is not None else _one_scenario(scenario or "basic")
    _profile(profile)
    return n, target, name, (_load_plan(plan) if plan else None)


# Report options shared by `campaign` and `merge`: one declaration, one help text.
JsonOut = Annotated[Path | None, typer.Option("--json", help="write the JSON report")]
JunitOut = Annotated[Path | None, typer.Option(help="write JUnit XML")]
HtmlOut = Annotated[Path | None, typer.Option(help="write an HTML campaign page")]
RequireCoverage = Annotated[
    bool, typer.Option(help="fail when a catalogued fault point never fired")
]

@app.command()
def campaign(
    scenario: Annotated[str | None, typer.Option(
        help="a scenario, a comma list, or 'all' [default: basic]")] = None,
    app_ref: AppRef = None,
    seeds: Annotated[str, typer.Option(help="seed range: N-M, N, or a comma list")] = "1-100",
    profile: Annotated[str, typer.Option(help="calm, default or swarm")] = "default",
    jobs: Annotated[int, typer.Option(help="worker processes")] = 1,
    json_path: JsonOut = None,
    junit: JunitOut = None,
    html: HtmlOut = None,
    require_coverage: RequireCoverage = False,
    progress_every: Annotated[float, typer.Option(
        help="off a terminal: a progress line every N seconds (0: none)")] = DEFAULT_EVERY_S,
    shard: Annotated[str | None, typer.Option(
        help="K/N: run only the K-th of N deterministic slices (combine with harness merge)")
    ] = None,
    require_sometimes: Annotated[bool, typer.Option(
        help="with --app: fail when a sometimes() assertion was never true")] = False,
) -> None:
    """Run every seed of every scenario (or of --app) and report violations and coverage."""
    from sim.campaign import parse_seeds, parse_shard, plan, run_campaign
    from sim.campaign import shard as slice_of

    target = _app(app_ref, scenario) if app_ref is not None else None
    names = [target.name] if target is not None else _scenarios(scenario or "basic")
    _profile(profile)
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        _die(str(exc))
    if jobs < 1:
        _die("--jobs must be at least 1")
    try:
        part = parse_shard(shard) if shard is not None else None
    except ValueError as exc:
        _die(f"--shard: {exc}")
    usage.prepare_outputs({"--json": json_path, "--junit": junit, "--html": html})
    if target is not None:
        rep = _app_campaign(target, seed_list, profile, jobs, part, progress_every)
    else:
        work = plan(names, seed_list, profile)
        if part is not None:
            work = slice_of(work, *part)
        with Progress(err, progress_every) as progress:
            progress.expect(len(work))
            rep = run_campaign(work, jobs, progress.tick)
        for r in rep.results:
            r["replay"] = replay_command(r["seed"], r["scenario"], r["profile"])
    _print_summary(rep, profile)
    doc = reports.campaign_json(rep, names, profile, require_coverage=require_coverage)
    if part is not None:
        doc["shard"] = f"{part[0]}/{part[1]}"
    if target is not None:
        _report_sometimes(rep, doc, require_sometimes)
    _finish(rep, doc, profile, json_path, junit, html, target)


def _app_campaign(target: Any, seeds: list[int], profile: str, jobs: int,
                  part: tuple[int, int] | None, progress_every: float) -> Any:
    """The seeds (or this shard of them) of an app; each result names its replay."""
    from harness.api.running import campaign_report
    from sim.campaign import shard as slice_of

    if part is not None:
        seeds = [s for (s, *_) in slice_of([(s, "", "", None) for s in seeds], *part)]
    with Progress(err, progress_every) as progress:
        progress.expect(len(seeds))
        try:
            return campaign_report(target, seeds, profile, jobs, progress.tick)
        except ValueError as exc:
            _die(str(exc))


def _report_sometimes(rep: Any, doc: dict[str, Any], required: bool) -> None:
    """List sometimes() assertions no seed saw true; with `required`, they fail the run."""
    from harness.api.running import never_true

    missing = never_true(rep.results)
    doc["sometimes_never_true"] = missing
    if missing:
        say(f"sometimes never true in any seed: {', '.join(missing)}")
        if required:
            doc["verdict"] = "fail"


def _finish(rep: Any, doc: dict[str, Any], profile: str, json_path: Path | None,
            junit: Path | None, html: Path | None, target: Any = None) -> None:
    """Write the reports, list the gaps and replays, print the verdict, exit 1 on fail."""
    if json_path:
        json_path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if junit:
        junit.write_text(reports.campaign_junit(rep, profile))
    if html:
        html.write_text(reports.campaign_html(doc, _replay_pages(rep, html, target)))
    gaps = rep.gaps()
    if gaps:
        say(f"coverage gaps (catalogued points never fired): {', '.join(gaps)}")
    if rep.failures:
        say("violations found; replay each with:")
        for r in rep.failures:
            say(f"  {r['replay']}")
    say(reports.verdict_line(doc))
    if doc["verdict"] != "pass":
        raise typer.Exit(1)


REPLAY_PAGES = 20
"""At most this many violations get their own replay page beside the campaign page."""


def shrink_command(seed: int, scenario: str, profile: str) -> str:
    return (f"{_break_prefix()}harness shrink --seed {seed} --scenario {scenario} "
            f"--profile {profile} --emit-test test_{scenario}_seed_{seed}.py")


def _replay_pages(rep: Any, page: Path, app_target: Any = None) -> dict[tuple[str, int], str]:
    """Write a replay page for each of the first violations; their hrefs for the campaign page."""
    from harness.api import running
    from sim import breaks
    from sim.kernel import run_simulation

    folder = page.parent / f"{page.stem}-replays"
    links: dict[tuple[str, int], str] = {}
    for r in rep.failures[:REPLAY_PAGES]:
        seed, scenario, profile = r["seed"], r["scenario"], r["profile"]
        if app_target is not None:
            result = running.simulate(app_target, seed, profile,
                                      break_name=breaks.from_env()).sim_result()
            commands = (running.replay_command(app_target, seed, profile),
                        running.shrink_command(app_target, seed, profile))
        else:
            result = run_simulation(seed, scenario, profile, break_name=breaks.from_env())
            commands = (replay_command(seed, scenario, profile),
                        shrink_command(seed, scenario, profile))
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{scenario}-{seed}.html"
        target.write_text(reports.replay_html(result, *commands))
        links[(scenario, seed)] = f"{folder.name}/{target.name}"
    return links


@app.command()
def merge(
    reports_in: Annotated[list[Path], typer.Argument(
        metavar="REPORT...", help="JSON reports of harness campaign --shard K/N")],
    json_path: JsonOut = None,
    junit: JunitOut = None,
    html: HtmlOut = None,
    require_coverage: RequireCoverage = False,
) -> None:
    """Combine shard reports into the report of the whole campaign (harness.merge)."""
    from harness.merge import MergeError
    from harness.merge import merge as do_merge

    usage.prepare_outputs({"--json": json_path, "--junit": junit, "--html": html})
    try:
        merged = do_merge(reports_in)
    except MergeError as exc:
        _die(str(exc))
    rep = merged.report
    for r in rep.results:
        r.setdefault("replay", replay_command(r["seed"], r["scenario"], r["profile"]))
    _print_summary(rep, merged.profile)
    required = require_coverage or merged.require_coverage
    doc = reports.campaign_json(rep, merged.scenarios, merged.profile, required)
    doc.update(code_digest=merged.code_digest, shards=rep.shards)
    doc["break"] = merged.break_name
    _finish(rep, doc, merged.profile, json_path, junit, html)


def _print_summary(rep: Any, profile: str) -> None:
    virtual = sum(r["virtual_s"] for r in rep.results)
    runs = sum(r["runs"] for r in rep.results)
    head = Table(title=f"campaign ({profile})")
    for col in ("simulations", "seeds", "runs simulated", "virtual s", "wall s", "virtual/wall",
                "violations"):
        head.add_column(col, justify="right", overflow="fold")
    ratio = virtual / rep.wall_s if rep.wall_s else 0.0
    seeds = len({r["seed"] for r in rep.results})
    head.add_row(str(len(rep.results)), str(seeds), str(runs), f"{virtual:,.0f}",
                 f"{rep.wall_s:,.1f}",
                 f"{ratio:,.0f}x", str(len(rep.failures)))
    out.print(head)
    if rep.failures:
        inv = Table(title="violations by invariant")
        inv.add_column("invariant", overflow="fold")
        inv.add_column("simulations", justify="right")
        for name, n in rep.violations_by_invariant().items():
            inv.add_row(name, str(n))
        out.print(inv)
    cov = rep.coverage()
    points = Table(title="fault points")
    points.add_column("point", overflow="fold")
    points.add_column("hits", justify="right")
    points.add_column("fires", justify="right")
    for name, c in cov["points"].items():
        points.add_row(name, str(c["hits"]), str(c["fires"]))
    out.print(points)
    kinds = Table(title="fault kinds fired")
    kinds.add_column("kind", overflow="fold")
    kinds.add_column("fires", justify="right")
    for name, n in cov["kinds"].items():
        kinds.add_row(name, str(n))
    out.print(kinds)


@app.command()
def replay(
    seed: Annotated[str, typer.Option(help="the seed to replay")],
    scenario: Annotated[str | None, typer.Option(help="the scenario [default: basic]")] = None,
    app_ref: AppRef = None,
    profile: Annotated[str, typer.Option(help="calm, default or swarm")] = "default",
    plan: Annotated[Path | None, typer.Option(help="replay exactly this fault plan")] = None,
    trace: Annotated[Path | None, typer.Option(help="write the trace (JSON lines)")] = None,
    html: Annotated[Path | None, typer.Option(help="write an HTML timeline")] = None,
) -> None:
    """Re-run one seed (of a scenario or of --app); print its trace hash and verdict."""
    from harness.api import running
    from sim.kernel import run_simulation

    n, target, name, fault_plan = _one_seed(seed, scenario, app_ref, profile, plan)
    usage.prepare_outputs({"--trace": trace, "--html": html})
    if target is not None:
        result = running.simulate(target, n, profile, fault_plan).sim_result()
        commands = (running.replay_command(target, n, profile, plan),
                    running.shrink_command(target, n, profile))
    else:
        result = run_simulation(n, name, profile, fault_plan)
        commands = replay_command(n, name, profile, plan), shrink_command(n, name, profile)
    if trace:
        trace.write_text("".join(line + "\n" for line in result.trace_lines))
    if html:
        html.write_text(reports.replay_html(result, *commands))
    say(f"trace-hash: {result.trace_hash}")
    say(f"runs: {result.runs}  boots: {result.boots}  faults fired: "
              f"{len(result.fired.faults)}  virtual: {result.virtual_s:g}s")
    if result.ok:
        say("verdict: ok (every invariant held)")
        return
    message = result.violation.message if result.violation else result.error
    say(f"verdict: {result.verdict} [{result.invariant}] {message}")
    say(f"replay: {commands[0]}")
    raise typer.Exit(1)


@app.command()
def shrink(
    seed: Annotated[str, typer.Option(help="a failing seed")],
    scenario: Annotated[str | None, typer.Option(help="the scenario [default: basic]")] = None,
    app_ref: AppRef = None,
    profile: Annotated[str, typer.Option(help="calm, default or swarm")] = "default",
    plan: Annotated[Path | None, typer.Option(help="shrink this plan instead")] = None,
    out_path: Annotated[Path | None, typer.Option("--out", help="where to write the plan")] = None,
    emit_test: Annotated[
        Path | None, typer.Option(help="write a pytest regression test replaying the plan")
    ] = None,
) -> None:
    """Minimise the failing fault plan of a seed while the same invariant fails."""
    from sim.shrink import shrink as do_shrink

    n, target_app, name, start = _one_seed(seed, scenario, app_ref, profile, plan)
    usage.prepare_outputs({"--out": out_path, "--emit-test": emit_test})
    if target_app is not None:
        _shrink_app(target_app, n, profile, start, out_path, emit_test)
    result = do_shrink(n, name, profile, start)
    if result is None:
        say(f"seed {n} of {name} does not fail: nothing to shrink")
        return
    target = out_path or Path(f"shrunk-{name}-{n}.json")
    result.plan.save(target)
    before = len(result.original.fired.faults) if start is None else len(start.faults)
    _print_shrunk(
        result.final.invariant, before, result.plan, result.attempts, target,
        (emit_test, lambda: regression_test(n, name, profile, result)),
        replay_command(n, name, profile, target),
    )


def _shrink_app(target: Any, seed: int, profile: str, start: Any, out_path: Path | None,
                emit_test: Path | None) -> NoReturn:
    """`shrink --app`: the shrunk plan, and a regression test importing the app."""
    from harness.api import regression_test as app_test
    from harness.api import running

    path = out_path or Path(f"shrunk-{target.name}-{seed}.json")
    result = running.shrink(target, seed, profile, start, save_to=path)
    if result is None:
        say(f"seed {seed} of {target.name} does not fail: nothing to shrink")
        raise typer.Exit(0)
    _print_shrunk(
        result.invariant, result.faults_before, result.plan, result.attempts, path,
        (emit_test, lambda: app_test(target, result)), result.replay,
    )


def _print_shrunk(invariant: str | None, before: int, plan: Any, attempts: int, path: Path,
                  emit: tuple[Path | None, Callable[[], str]], replay: str) -> NoReturn:
    """Both shrink forms end here: the minimal plan, the optional regression test
    (rendered only when asked for), the replay command, and exit 1 (a violation)."""
    say(f"invariant: {invariant}")
    say(f"faults: {before} -> {len(plan.faults)} in {attempts} runs")
    for pf in plan.faults:
        say(f"  {pf.describe()}")
    say(f"plan: {path}")
    emit_test, render = emit
    if emit_test is not None:
        emit_test.parent.mkdir(parents=True, exist_ok=True)
        emit_test.write_text(render())
        say(f"regression test: {emit_test}")
    say(f"replay: {replay}")
    raise typer.Exit(1)


def regression_test(seed: int, scenario: str, profile: str, result: Any) -> str:
    """A standalone pytest module that replays the minimal plan and asserts it holds now."""
    plan = result.plan.model_dump_json(indent=4)
    invariant = result.final.invariant
    return f'''"""Regression: {scenario} seed {seed} once broke `{invariant}`.

Written by `harness shrink --emit-test`; replays the minimal fault plan and
asserts every invariant holds now.
"""

from sim.faults.plan import FaultPlan
from sim.kernel import run_simulation

PLAN = FaultPlan.model_validate_json(
    """{plan}"""
)


def test_{scenario}_seed_{seed}_{invariant}_holds() -> None:
    result = run_simulation({seed}, {scenario!r}, {profile!r}, PLAN)
    assert result.ok, (result.invariant, result.violation, result.error)
'''


@app.command()
def gate(
    policy: Annotated[Path, typer.Option(help="the gate policy (TOML)")] = Path("ci/gate.toml"),
    jobs: Annotated[int, typer.Option(help="worker processes")] = 2,
    out_dir: Annotated[Path, typer.Option("--out", help="where reports go")] = Path("out/gate"),
    receipts: Annotated[Path | None, typer.Option(help="receipts directory")] = None,
    progress_every: Annotated[float, typer.Option(
        help="off a terminal: a progress line every N seconds (0: none)")] = DEFAULT_EVERY_S,
    reuse: Annotated[list[Path] | None, typer.Option(
        help="campaign JSON reports (files or folders) whose simulations on this code "
             "are taken instead of run again (repeatable)")] = None,
    reuse_receipts: Annotated[bool, typer.Option(
        help="check the receipts already in the receipts folder (proved by an earlier "
             "step on this code) instead of proving them again")] = False,
) -> None:
    """Decide whether this build may ship: exit 0 ship, 1 do not ship, 2 policy error."""
    from harness.gate import Policy, PolicyError, run_gate

    try:
        rules = Policy.load(policy)
    except PolicyError as exc:
        _die(str(exc))
    if jobs < 1:
        _die("--jobs must be at least 1")
    usage.prepare_outputs({}, {"--out": out_dir})
    reused = _reused(reuse or [])
    with Progress(err, progress_every, label="gate") as progress:
        result = run_gate(rules, jobs, replay_command, receipts, progress, reused,
                          prove_receipts=not reuse_receipts)
    (out_dir / "gate.xml").write_text(reports.gate_junit(result))
    (out_dir / "gate.json").write_text(
        json.dumps(reports.gate_json(result), indent=2, sort_keys=True) + "\n")
    markdown = reports.gate_markdown(result)
    (out_dir / "gate.md").write_text(markdown)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as fh:
            fh.write(markdown)
    say(markdown)
    say(f"reports: {out_dir}/gate.xml, gate.json, gate.md")
    if not result.ship:
        raise typer.Exit(1)


def _reused(paths: list[Path]) -> Any:
    """The campaign reports `--reuse` names; a missing path is a usage error."""
    from harness.reuse import load
    from sim import breaks

    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        _die(f"--reuse: {', '.join(missing)} does not exist")
    return load(paths, breaks.from_env()) if paths else None


@app.command()
def receipts(
    window: Annotated[list[str] | None, typer.Option(
        help="a window, a leased check (leased.*), a several-Vessel check (vessels.*) or "
             "a window a leased check proves (repeatable)")] = None,
    all_windows: Annotated[bool, typer.Option("--all", help="every catalogued window")] = False,
    leased: Annotated[bool, typer.Option(
        "--leased/--no-leased",
        help="also run the real-process leased-job checks (seed 004) unless windows are "
             "named")] = True,
    out_dir: Annotated[Path, typer.Option("--out", help="where receipts go")] = Path("receipts"),
    dsn: Annotated[str | None, typer.Option(help="a PostgreSQL server to create databases on")]
    = None,
    db_prefix: Annotated[str | None, typer.Option(
        help="prefix of the databases created for receipts (lowercase, digits, _)")] = None,
    ports: Annotated[str | None, typer.Option(
        help="loopback port range A-B for the Vessels the receipts spawn")] = None,
    app_ref: AppRef = None,
) -> None:
    """Prove crash windows with real two-boot PostgreSQL lifecycles, and leased-job checks.

    With --app, both boots serve your Patterns (`vessel serve --app`) and each
    window submits a sample of your workload that reaches it (no leased checks).
    Exit 1 when any receipt failed, 2 on a usage or environment error.
    """
    from harness.pg import PostgresUnavailable, provision
    from harness.receipts.index import write_index
    from harness.receipts.leased_checks import run_check
    from harness.receipts.lifecycle import prove
    from harness.receipts.selection import choose

    try:
        if app_ref is not None:
            from harness.receipts.app import app_windows

            chosen = app_windows(_app(app_ref, None), window or [], all_windows)
            checks: list[Any] = []
        else:
            chosen, checks = choose(window or [], all_windows, leased)
    except KeyError as exc:
        _die(str(exc.args[0]))
    usage.prepare_outputs({}, {"--out": out_dir})
    _receipt_options(db_prefix, ports)
    if dsn:
        os.environ["HARNESS_PG_DSN"] = dsn
    failed = 0
    try:
        with provision() as server:
            if chosen:
                whose = f", app {app_ref}" if app_ref else ""
                table = Table(title=f"restart receipts ({server.source} PostgreSQL{whose})")
                table.add_column("window", overflow="fold")
                for col in ("verdict", "boot 1", "pids", "note"):
                    table.add_column(col, overflow="fold")
                for w in chosen:
                    receipt = prove(w, server.dsn, out_dir)
                    boots = receipt.get("boots", [])
                    failed += receipt["verdict"] == "failed"
                    table.add_row(w.point, receipt["verdict"],
                                  str(boots[0].get("exit_signal")) if boots else "",
                                  ", ".join(str(b.get("pid")) for b in boots),
                                  str(receipt.get("reason")
                                      or "; ".join(receipt.get("problems", [])))[:80])
                out.print(table)
            if checks:
                table = Table(title="leased jobs (seed 004) and several Vessels "
                                    f"({server.source} PostgreSQL)")
                table.add_column("check", overflow="fold")
                for col in ("verdict", "proves", "seconds", "pids", "note"):
                    table.add_column(col, overflow="fold")
                for check in checks:
                    receipt = run_check(check, server.dsn, out_dir)
                    failed += receipt["verdict"] != "proved"
                    table.add_row(check.name, receipt["verdict"], check.proves or "",
                                  f"{receipt.get('seconds', 0):.1f}",
                                  ", ".join(str(p.get("pid"))
                                            for p in receipt.get("processes", [])),
                                  str(receipt.get("reason")
                                      or "; ".join(receipt.get("problems", [])))[:80])
                out.print(table)
    except PostgresUnavailable as exc:
        _die(str(exc))
    write_index(out_dir, leased=app_ref is None)
    say(f"receipts: {out_dir}/index.md, index.html")
    if failed:
        raise typer.Exit(1)


def _receipt_options(db_prefix: str | None, ports: str | None) -> None:
    """Validate --db-prefix and --ports and hand them to the receipt machinery (env)."""
    import re

    from harness.pg import DB_PREFIX_ENV
    from harness.receipts.process import PORTS_ENV, port_range

    if db_prefix is not None:
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,29}", db_prefix):
            _die(f"--db-prefix {db_prefix!r}: use 1-30 of a-z, 0-9 and _, not starting "
                 "with a digit")
        os.environ[DB_PREFIX_ENV] = db_prefix
    if ports is not None:
        try:
            port_range(ports)
        except ValueError as exc:
            _die(f"--ports: {exc}")
        os.environ[PORTS_ENV] = ports


@app.command()
def soak(
    runs: Annotated[int, typer.Option(help="Runs to admit (mixed Patterns)")] = 200,
    kill_every: Annotated[float, typer.Option(
        help="SIGKILL a Vessel this often, in seconds (0: never)")] = 0.0,
    pg_restarts: Annotated[int, typer.Option(
        help="restart PostgreSQL this many times (the soak starts its own cluster)")] = 0,
    vessels: Annotated[int, typer.Option(help="Vessels serving the one database")] = 1,
    toxics: Annotated[list[str] | None, typer.Option(
        help="a Toxiproxy toxic between the Vessels and PostgreSQL, kind[:attr=N,...] "
             "(repeatable), e.g. latency:latency=20,jitter=5")] = None,
    concurrency: Annotated[int, typer.Option(help="client threads")] = 8,
    seed: Annotated[int, typer.Option(help="seeds the workload and the fault choices")] = 1,
    settle_within: Annotated[float, typer.Option(
        help="seconds every Run has to settle after the faults stop")] = 180.0,
    recover_within: Annotated[float, typer.Option(
        help="seconds a probe Run has to complete after each fault")] = 90.0,
    out_dir: Annotated[Path, typer.Option("--out", help="report and Vessel logs")]
    = Path("out/soak"),
    dsn: Annotated[str | None, typer.Option(
        help="a PostgreSQL server to create the soak database on")] = None,
) -> None:
    """Soak real Vessels on PostgreSQL under kills, restarts and toxics.

    Exit 1 on any lost, duplicated, stuck or wrongly failed Run, or a fault
    the system did not recover from; 2 on a usage or environment error.
    """
    from harness.pg import PostgresUnavailable
    from harness.pg_cluster import ClusterUnavailable
    from harness.receipts.process import ReceiptError
    from harness.soak import SoakOptions, SoakUsageError, run_soak
    from harness.soak.options import Toxic

    try:
        options = SoakOptions(
            runs=runs, kill_every_s=kill_every, pg_restarts=pg_restarts, vessels=vessels,
            toxics=tuple(Toxic.parse(t) for t in toxics or []), concurrency=concurrency,
            seed=seed, settle_within_s=settle_within, recover_within_s=recover_within,
            out_dir=out_dir, dsn=dsn,
        )
    except SoakUsageError as exc:
        _die(str(exc))
    usage.prepare_outputs({}, {"--out": out_dir})
    try:
        outcome = run_soak(options, say)
    except (PostgresUnavailable, ClusterUnavailable) as exc:
        _die(str(exc))
    except ReceiptError as exc:
        say(f"verdict: FAIL the soak could not keep its Vessels up: {exc}")
        raise typer.Exit(1) from None
    _print_soak(outcome, out_dir)
    if not outcome.passed:
        raise typer.Exit(1)


def _print_soak(outcome: Any, out_dir: Path) -> None:
    counts = outcome.counts
    table = Table(title="soak")
    table.add_column("outcome")
    table.add_column("Runs", justify="right")
    for name, value in counts.items():
        table.add_row(name, str(value))
    out.print(table)
    for kind, figures in outcome.recovery.items():
        say(f"recovery after {kind}: {figures['faults']} faults; serving again p50 "
            f"{figures['p50_s']} s, p99 {figures['p99_s']} s, max {figures['max_s']} s; "
            f"probe DONE p50 {figures['probe_done_p50_s']} s, "
            f"p99 {figures['probe_done_p99_s']} s")
    for what, examples in outcome.examples.items():
        for example in examples:
            say(f"  {what}: {example}")
    bad = {k: v for k, v in counts.items() if v and k in (
        "lost", "duplicated", "stuck", "failed_live", "failed_other", "invariants",
        "unrecovered")}
    verdict = "PASS" if outcome.passed else "FAIL"
    detail = ", ".join(f"{v} {k}" for k, v in bad.items()) or "0 lost, 0 duplicated, 0 stuck"
    say(f"verdict: {verdict} {counts.get('admitted', 0)} admitted, {detail} "
        f"(report: {out_dir}/soak.json)")


@app.command()
def rules(
    json_path: Annotated[Path | None, typer.Option(
        "--json", help="write the catalogue as JSON ('-' for stdout)")] = None,
    sweep_seeds: Annotated[str | None, typer.Option(
        "--sweep", help="also run every break over these swarm seeds (N-M)")] = None,
    max_seeds: Annotated[int, typer.Option(help="with --sweep: seeds per break at most")] = 40,
) -> None:
    """The seed rules with their invariants, scenarios and breaks; exit 1 on any gap."""
    from harness import rules_report
    from sim.campaign import parse_seeds

    rows = rules_report.validate()
    doc = rules_report.rules_json(rows)
    if sweep_seeds is not None:
        try:
            seed_list = parse_seeds(sweep_seeds)
        except ValueError as exc:
            _die(str(exc))
        def tick(r: Any) -> None:
            seen = f"caught at seed {r.caught_at}" if r.caught else "SURVIVED"
            err.print(f"break {r.name} @ {r.scenario}: {seen} ({r.seeds_tried} seeds, "
                      f"{r.wall_s:.1f}s)", markup=False, highlight=False, soft_wrap=True)

        report = rules_report.sweep(seed_list, max_seeds=max_seeds, budget_s=float("inf"),
                                    tick=tick)
        doc["sweep"] = report.as_dict()
    if json_path is not None and str(json_path) == "-":
        say(json.dumps(doc, indent=2, sort_keys=True))
    else:
        _print_rules(rows, doc)
        if json_path is not None:
            json_path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    survivors = doc.get("sweep", {}).get("survivors", [])
    if doc["gaps"] or survivors:
        for rule_id, missing in doc["gaps"].items():
            err.print(f"gap: {rule_id}: {'; '.join(missing)}", markup=False, highlight=False,
                      soft_wrap=True)
        for name in survivors:
            err.print(f"survived: break {name}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _print_rules(rows: list[Any], doc: dict[str, Any]) -> None:
    swept = {b["name"]: b for b in doc.get("sweep", {}).get("breaks", [])}
    if out.is_terminal:
        table = Table(title=f"seed rules ({doc['complete']} complete, {doc['unobservable']} "
                            f"unobservable, {len(doc['gaps'])} with gaps, of {doc['total']})")
        for col in ("rule", "seed / section", "invariants", "scenarios", "breaks", "status"):
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*_rule_cells(row, swept))
        out.print(table)
        return
    say("rule\tseed\tsection\tinvariants\tscenarios\tbreaks\tstatus")
    for row in rows:
        r = row.rule
        cells = _rule_cells(row, swept)
        say("\t".join([r.id, r.seed[:3], r.section, cells[2], cells[3], cells[4], cells[5]]))
    say(f"{doc['total']} rules: {doc['complete']} complete, {doc['unobservable']} "
        f"unobservable, {len(doc['gaps'])} with gaps")


def _rule_cells(row: Any, swept: dict[str, dict[str, Any]]) -> list[str]:
    r = row.rule
    breaks = []
    for b in r.breaks:
        text = f"{b.name}@{b.scenario}"
        if b.name in swept:
            hit = swept[b.name]
            text += f" (seed {hit['caught_at']})" if hit["caught"] else " (SURVIVED)"
        breaks.append(text)
    if row.gaps:
        status = "GAP: " + "; ".join(row.gaps)
    elif not r.observable:
        status = f"unobservable: {r.unobservable}; covered by {', '.join(r.covered_by)}"
    else:
        status = "ok"
    return [r.id, f"{r.seed[:3]} {r.section}", ", ".join(r.invariants),
            ", ".join(r.scenarios), ", ".join(breaks), status]


@app.command()
def faults() -> None:
    """The catalogue of named fault points and the windows they mark."""
    from runtime.faults import CATALOGUE

    table = Table(title="fault points")
    table.add_column("point", overflow="fold")
    table.add_column("window", overflow="fold")
    table.add_column("expected recovery", overflow="fold")
    for p in CATALOGUE.values():
        table.add_row(p.name, p.window, p.expected)
    out.print(table)


@app.command()
def scenarios() -> None:
    """The registered simulation scenarios."""
    from sim.scenarios import SCENARIOS, resolve

    resolve("all")
    table = Table(title="scenarios")
    table.add_column("name", overflow="fold")
    table.add_column("what it drives", overflow="fold")
    for s in SCENARIOS.values():
        note = f" [not in 'all': {s.quarantined}]" if s.quarantined else ""
        table.add_row(s.name, " ".join(s.description.split()) + note)
    out.print(table)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: usage mistakes are one line and exit 2 (`harness.usage`)."""
    logging.basicConfig(level=logging.ERROR)
    logging.disable(logging.WARNING)
    sys.exit(usage.run(app, "harness", argv))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
