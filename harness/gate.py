"""The pre-release gate: may this build ship? (DESIGN section 8, issue M8)

A policy (TOML) names campaigns (scenarios x profile x seeds), a wall-clock
budget, the minimum fires per catalogued fault point, the share of seeds
re-run in fresh processes to audit determinism, and whether restart
receipts are required (and for which windows; with them, unless
`require_leased = false`, every real-process leased-job check of seed 004
must be proved too, and unless `require_vessels = false` every several-Vessel
check of issue 15). The gate runs all of it and
checks the fault catalogue both ways. Verdict: ship (exit 0), do not ship
(exit 1); a broken policy or environment is exit 2 before anything runs.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich.console import Console

from harness.catalogue_check import check as check_catalogue
from harness.catalogue_check import code_digest
from harness.progress import Progress
from harness.reuse import Reused, index_reused_receipts, reachable_windows
from runtime.faults import CATALOGUE
from sim.campaign import CampaignReport, parse_seeds, plan, run_campaign
from sim.faults.options import PROFILES
from sim.scenarios import resolve


class PolicyError(Exception):
    """The policy file cannot be used: exit 2."""


def _only_known(value: list[str], known: Container[str], what: str, lists: str) -> list[str]:
    """`value` when every name in it is `known`; else a ValueError naming the unknown
    ones and the command (`lists`) that lists the known."""
    unknown = [v for v in value if v not in known]
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; see `{lists}`")
    return value


class CampaignSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scenarios: str = "all"
    profile: str = "swarm"
    seeds: str = "1-100"

    @field_validator("profile")
    @classmethod
    def _profile(cls, value: str) -> str:
        if value not in PROFILES:
            raise ValueError(f"unknown profile {value!r}; expected one of {', '.join(PROFILES)}")
        return value

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: str) -> str:
        parse_seeds(value)
        return value

    @field_validator("scenarios")
    @classmethod
    def _scenarios(cls, value: str) -> str:
        try:
            resolve(value)
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        return value

    def names(self) -> list[str]:
        return [s.name for s in resolve(self.scenarios)]


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    budget_s: float = Field(default=1800.0, gt=0)
    min_fires_per_point: int = Field(default=1, ge=0)
    determinism_audit_fraction: float = Field(default=0.01, ge=0.0, le=1.0)
    require_receipts: bool = False
    require_leased: bool = True
    """With `require_receipts`: every leased-job check (harness.receipts.leased_checks)
    runs and must be proved on this code."""
    require_vessels: bool = True
    """With `require_receipts`: every several-Vessel check (harness.receipts.vessels,
    two `vessel serve` on one database, one SIGKILLed) runs and must be proved."""
    receipts_dir: str = "receipts"
    require_rules: bool = False
    """Every seed rule of the catalogue (sim.rules) has invariant, scenario and break,
    or an unobservable reason with a covering test."""
    break_sweep: bool = False
    """Run every catalogued break until a seed catches it; a surviving break blocks
    shipping (seeds from the first swarm campaign, else the first campaign)."""
    break_max_seeds: int = Field(default=40, ge=1)
    break_budget_s: float = Field(default=180.0, gt=0)
    break_only: list[str] = Field(default_factory=list)
    """Sweep only these breaks (empty: every break of the catalogue)."""

    @field_validator("break_only")
    @classmethod
    def _break_only(cls, value: list[str]) -> list[str]:
        from sim.breaks import BREAKS

        return _only_known(value, BREAKS, "breaks", "harness rules")

    windows: list[str] = Field(default_factory=list)
    campaign: list[CampaignSpec] = Field(min_length=1)

    @field_validator("windows")
    @classmethod
    def _windows(cls, value: list[str]) -> list[str]:
        return _only_known(value, CATALOGUE, "windows", "harness faults")

    @classmethod
    def load(cls, path: Path) -> Policy:
        try:
            doc = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise PolicyError(f"policy file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"policy file {path} is not valid TOML: {exc}") from None
        try:
            return cls.model_validate(doc.get("gate", {}))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise PolicyError(f"policy {path}: gate.{where}: {err['msg']}") from None


@dataclass
class Check:
    """One line of the verdict: a JUnit test case and a Markdown row."""

    suite: str
    name: str
    ok: bool
    detail: str = ""
    seconds: float = 0.0
    replay: str | None = None


@dataclass
class GateResult:
    checks: list[Check] = field(default_factory=list)
    violations: list[dict[str, Any]] = field(default_factory=list)
    coverage: dict[str, Any] = field(default_factory=dict)
    sweep: dict[str, Any] | None = None
    """The break sweep (harness.rules_report.SweepReport.as_dict), when run."""
    digest: str = ""
    wall_s: float = 0.0

    @property
    def ship(self) -> bool:
        return all(c.ok for c in self.checks)


def run_gate(
    policy: Policy, jobs: int, replay_command: Any, receipts_root: Path | None = None,
    progress: Progress | None = None, reuse: Reused | None = None,
    prove_receipts: bool = True,
) -> GateResult:
    started = time.perf_counter()
    result = GateResult(digest=code_digest())
    tell = progress or Progress(Console(quiet=True), 0)
    for skipped in (reuse.skipped if reuse else []):
        tell.say(f"not reused: {skipped}")
    reports: list[tuple[CampaignSpec, CampaignReport]] = []
    for spec in policy.campaign:
        reports.append((spec, _campaign(spec, jobs, replay_command, result, tell, reuse)))
    _coverage(policy, reports, result)
    _catalogue(result)
    if policy.break_sweep:
        tell.say("break sweep: every catalogued break until a swarm seed catches it")
    _rules(policy, result)
    tell.say("determinism audit: re-running a sample of seeds in fresh processes")
    _determinism(policy, reports, result)
    if policy.require_receipts:
        tell.say("restart receipts and leased-job checks on real processes")
    _receipts(policy, receipts_root or Path(policy.receipts_dir), result, prove_receipts)
    result.wall_s = time.perf_counter() - started
    result.checks.append(Check("gate", "wall-clock budget", result.wall_s <= policy.budget_s,
                               f"{result.wall_s:.0f}s of {policy.budget_s:.0f}s"))
    return result


def _campaign(
    spec: CampaignSpec, jobs: int, replay_command: Any, result: GateResult,
    tell: Progress, reuse: Reused | None = None,
) -> CampaignReport:
    work = plan(spec.names(), parse_seeds(spec.seeds), spec.profile)
    reused, work = reuse.take(work) if reuse else ([], work)
    tell.say(f"campaign {spec.scenarios} x {spec.profile} x {spec.seeds}: "
             f"{len(work)} to simulate, {len(reused)} reused")
    tell.expect(len(work))
    report = run_campaign(work, jobs, tell.tick)
    report.results[:0] = reused
    for name in spec.names():
        mine = [r for r in report.results if r["scenario"] == name]
        bad = [r for r in mine if r["verdict"] != "ok"]
        for r in bad:
            r["replay"] = replay_command(r["seed"], r["scenario"], r["profile"])
            result.violations.append({k: r[k] for k in (
                "seed", "scenario", "profile", "invariant", "message", "replay")})
        again = sum(bool(r.get("reused")) for r in mine)
        detail = f"{len(mine)} seeds, {len(bad)} violations"
        detail += f" ({again} reused from campaign reports)" if again else ""
        if bad:
            detail += f"; first: [{bad[0]['invariant']}] {bad[0]['message']}"
        result.checks.append(Check(
            "campaigns", f"{name} x {spec.profile} x {spec.seeds}", not bad, detail,
            sum(r["wall_s"] for r in mine), bad[0]["replay"] if bad else None,
        ))
    return report


def _coverage(
    policy: Policy, reports: list[tuple[CampaignSpec, CampaignReport]], result: GateResult
) -> None:
    fires: dict[str, int] = {p: 0 for p in CATALOGUE}
    for _, report in reports:
        for point, c in report.coverage()["points"].items():
            if point in fires:
                fires[point] += c["fires"]
    result.coverage = fires
    for point, n in fires.items():
        result.checks.append(Check(
            "coverage", point, n >= policy.min_fires_per_point,
            f"fired {n} times (minimum {policy.min_fires_per_point})",
        ))


def _catalogue(result: GateResult) -> None:
    report = check_catalogue()
    result.checks.append(Check(
        "catalogue", "called points are catalogued", not report.missing,
        "missing from the catalogue: " + ", ".join(report.missing) if report.missing else "ok",
    ))
    result.checks.append(Check(
        "catalogue", "catalogued points are called", not report.unused,
        "never called: " + ", ".join(report.unused) if report.unused else "ok",
    ))


def _rules(policy: Policy, result: GateResult) -> None:
    """The rule catalogue's completeness, then the break sweep (issue M9)."""
    from harness import rules_report

    if policy.require_rules:
        for row in rules_report.validate():
            detail = "; ".join(row.gaps) if row.gaps else (
                "ok" if row.rule.observable else f"unobservable, covered by "
                f"{', '.join(row.rule.covered_by)}")
            result.checks.append(Check("rules", row.rule.id, not row.gaps, detail))
    if not policy.break_sweep:
        return
    swarm = [c for c in policy.campaign if c.profile == "swarm"] or policy.campaign
    seeds = parse_seeds(swarm[0].seeds)
    report = rules_report.sweep(seeds, max_seeds=policy.break_max_seeds,
                                budget_s=policy.break_budget_s, profile="swarm",
                                only=set(policy.break_only) or None)
    result.sweep = report.as_dict()
    for r in report.results:
        if r.caught:
            detail = (f"caught at seed {r.caught_at} after {r.seeds_tried} seeds of "
                      f"{r.scenario}: {r.message}")
        else:
            detail = r.skipped or (f"survived {r.seeds_tried} seeds of {r.scenario}; "
                                   f"other violations: {r.other or 'none'}")
        replay = (f"SIM_BREAK={r.name} harness replay --seed {r.caught_at} --scenario "
                  f"{r.scenario} --profile swarm") if r.caught else None
        result.checks.append(Check("breaks", f"{r.name} ({r.rule})", r.caught, detail,
                                   r.wall_s, replay))


def _determinism(
    policy: Policy, reports: list[tuple[CampaignSpec, CampaignReport]], result: GateResult
) -> None:
    """Re-run a deterministic sample of seeds in fresh processes; hashes must match."""
    if policy.determinism_audit_fraction <= 0:
        return
    for spec, report in reports:
        runs = sorted(report.results, key=lambda r: (r["scenario"], r["seed"]))
        n = max(1, math.ceil(len(runs) * policy.determinism_audit_fraction))
        step = max(1, len(runs) // n)
        for r in runs[::step][:n]:
            fresh = _fresh_hash(r["seed"], r["scenario"], spec.profile)
            ok = fresh == r["trace_hash"]
            result.checks.append(Check(
                "determinism", f"{r['scenario']} seed {r['seed']} ({spec.profile})", ok,
                "same trace-hash in a fresh process" if ok
                else f"campaign {r['trace_hash'][:16]} != fresh {str(fresh)[:16]}",
            ))


def _fresh_hash(seed: int, scenario: str, profile: str) -> str | None:
    code = (
        "import sys; from sim.kernel import run_simulation;"
        f"print(run_simulation({seed}, {scenario!r}, {profile!r}).trace_hash)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout else None


def _receipts(policy: Policy, root: Path, result: GateResult, prove: bool = True) -> None:
    if not policy.require_receipts:
        return
    if prove:
        _prove_receipts(policy, root, result)
    else:
        index_reused_receipts(root)
    index = root / "index.json"
    if not index.exists():
        result.checks.append(Check("receipts", "receipts present", False,
                                   f"no {index}; run `harness receipts --all --out {root}`"))
        return
    doc = json.loads(index.read_text())
    entries = {e["window"]: e for e in doc.get("windows", [])}
    # Every window a Vessel restart reaches must have its receipt, proved or reused.
    wanted = policy.windows or sorted(
        set(reachable_windows()) | {w for w, e in entries.items() if e["verdict"] != "missing"})
    for window in wanted:
        entry = entries.get(window)
        if entry is None:
            result.checks.append(Check("receipts", window, False, "missing"))
            continue
        same_code = entry.get("code_digest") == result.digest
        proved = entry.get("verdict") == "proved"
        detail = "proved" if proved else f"verdict {entry.get('verdict')}"
        if not same_code:
            detail = "receipt is for other code (digest mismatch): re-run harness receipts"
        result.checks.append(Check("receipts", window, proved and same_code, detail))
    if policy.require_leased:
        _leased_receipts(doc, result)
    if policy.require_vessels:
        _vessel_receipts(doc, result)


def _leased_receipts(index: dict[str, Any], result: GateResult) -> None:
    """Every leased-job check must be proved on this code: a failed one blocks shipping."""
    from harness.receipts.leased_checks import LEASED_CHECKS

    _check_receipts(index.get("leased", []), list(LEASED_CHECKS), "leased receipts", result)


def _vessel_receipts(index: dict[str, Any], result: GateResult) -> None:
    """Every several-Vessel check must be proved on this code (harness.receipts.vessels)."""
    from harness.receipts.vessels import VESSEL_CHECKS

    _check_receipts(index.get("vessels", []), list(VESSEL_CHECKS), "vessel receipts", result)


def _check_receipts(found: list[dict[str, Any]], names: list[str], group: str,
                    result: GateResult) -> None:
    entries = {e["check"]: e for e in found}
    for name in names:
        entry = entries.get(name)
        if entry is None:
            result.checks.append(Check(group, name, False, "missing"))
            continue
        same_code = entry.get("code_digest") == result.digest
        proved = entry.get("verdict") == "proved"
        detail = "proved" if proved else f"verdict {entry.get('verdict')}"
        if entry.get("reason") and not proved:
            detail += f": {entry['reason']}"
        if proved and not same_code:
            detail = "receipt is for other code (digest mismatch): re-run harness receipts"
        result.checks.append(Check(group, name, proved and same_code, detail,
                                   float(entry.get("seconds") or 0.0)))


def _run_receipt(result: GateResult, name: str, run: Callable[[], dict[str, Any]],
                 passed: Callable[[str], bool]) -> None:
    """Run one receipt (a window's lifecycle or a check) and record it as a check that
    holds when its verdict `passed`, timed, with its reason or problems as detail."""
    started = time.perf_counter()
    receipt = run()
    result.checks.append(Check(
        "receipts-run", name, passed(receipt["verdict"]),
        receipt.get("reason") or "; ".join(receipt.get("problems", [])) or "ran",
        time.perf_counter() - started,
    ))


def _prove_receipts(policy: Policy, root: Path, result: GateResult) -> None:
    """Run the two-boot lifecycle for every required window on this code, the
    leased-job checks (all of them under `require_leased`, else those a named window
    needs) and, under `require_vessels`, the several-Vessel checks."""
    from harness.pg import PostgresUnavailable, provision
    from harness.receipts.index import write_index
    from harness.receipts.leased_checks import run_check
    from harness.receipts.lifecycle import prove
    from harness.receipts.selection import choose
    from harness.receipts.vessels import KIND, VESSEL_CHECKS

    windows, checks = choose(policy.windows, everything=not policy.windows,
                             leased=policy.require_leased)
    checks = [c for c in checks if c.kind != KIND]
    if policy.require_leased:
        checks = [c for c in choose([], leased=True)[1] if c.kind != KIND]
    if policy.require_vessels:
        checks += VESSEL_CHECKS.values()
    try:
        with provision() as server:
            for window in windows:
                _run_receipt(result, window.point, partial(prove, window, server.dsn, root),
                             lambda verdict: verdict != "failed")
            for check in checks:
                _run_receipt(result, check.name, partial(run_check, check, server.dsn, root),
                             lambda verdict: verdict == "proved")
    except PostgresUnavailable as exc:
        result.checks.append(Check("receipts", "PostgreSQL for receipts", False, str(exc)))
        return
    write_index(root)
