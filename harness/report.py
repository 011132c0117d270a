"""Campaign and replay reports: JSON, JUnit XML and self-contained HTML."""

from __future__ import annotations

import html
from typing import Any
from xml.etree import ElementTree as ET

from runtime.faults import CATALOGUE
from sim.checker import INVARIANTS
from sim.kernel import SimResult

SCHEMA_VERSION = 2
"""Version of the campaign JSON. 2 added `schema_version`, `verdict`, `simulations`
(one per seed and scenario; `seeds` stays the number of distinct seeds),
`by_scenario` totals, `code_digest` (runtime and sim sources) and `break`
(SIM_BREAK) and, per result, `wall_s` and `fires` (fault point -> fires,
non-zero only): enough for `harness gate --reuse` (`harness.reuse`)."""


def campaign_verdict(rep: Any, require_coverage: bool = False) -> str:
    """`fail` on any violation, or on a coverage gap when coverage is required."""
    return "fail" if rep.failures or (require_coverage and rep.gaps()) else "pass"


def by_scenario(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per-scenario totals: simulations, distinct seeds, Runs, violations, virtual s."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(r["scenario"], []).append(r)
    return {
        name: {
            "simulations": len(rs),
            "seeds": len({r["seed"] for r in rs}),
            "runs_simulated": sum(r["runs"] for r in rs),
            "violations": sum(r["verdict"] != "ok" for r in rs),
            "virtual_s": sum(r["virtual_s"] for r in rs),
        }
        for name, rs in sorted(groups.items())
    }


def verdict_line(doc: dict[str, Any]) -> str:
    """The campaign's last line: `verdict: PASS 1200 simulations, 0 violations`."""
    n = doc["simulations"]
    scenarios = len(doc["by_scenario"])
    plural = "s" if scenarios != 1 else ""
    line = (f"verdict: {doc['verdict'].upper()} {n} simulations ({scenarios} scenario{plural} x "
            f"{doc['seeds']} seeds, {doc['profile']}), {len(doc['violations'])} violations")
    gaps = doc["coverage_gaps"]
    if gaps:
        required = " (required)" if doc.get("require_coverage") else ""
        line += f", {len(gaps)} coverage gaps{required}"
    return line


def campaign_json(rep: Any, scenarios: list[str], profile: str,
                  require_coverage: bool = False) -> dict[str, Any]:
    from harness.reuse import simulation_digest
    from sim import breaks

    return {
        "schema_version": SCHEMA_VERSION,
        "code_digest": simulation_digest(),
        "break": breaks.from_env(),
        "verdict": campaign_verdict(rep, require_coverage),
        "require_coverage": require_coverage,
        "scenarios": scenarios,
        "profile": profile,
        "seeds": len({r["seed"] for r in rep.results}),
        "simulations": len(rep.results),
        "by_scenario": by_scenario(rep.results),
        "runs_simulated": sum(r["runs"] for r in rep.results),
        "virtual_s": sum(r["virtual_s"] for r in rep.results),
        "wall_s": rep.wall_s,
        "violations": [
            {
                "seed": r["seed"],
                "scenario": r["scenario"],
                "profile": r["profile"],
                "invariant": r["invariant"],
                "message": r["message"],
                "records": r["records"],
                "replay": r["replay"],
            }
            for r in rep.failures
        ],
        "violations_by_invariant": rep.violations_by_invariant(),
        "results": [
            {**{k: r[k] for k in ("seed", "scenario", "verdict", "trace_hash", "runs", "boots",
                                  "virtual_s", "wall_s", "fired")},
             "fires": {p: n for p, n in sorted(r["coverage"]["fires"].items()) if n}}
            for r in rep.results
        ],
        "coverage": rep.coverage(),
        "coverage_gaps": rep.gaps(),
    }


def campaign_junit(rep: Any, profile: str) -> str:
    suites = ET.Element("testsuites", name="harness campaign")
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for r in rep.results:
        by_scenario.setdefault(r["scenario"], []).append(r)
    for scenario, results in sorted(by_scenario.items()):
        failures = [r for r in results if r["verdict"] != "ok"]
        suite = ET.SubElement(
            suites, "testsuite", name=f"{scenario}[{profile}]", tests=str(len(results)),
            failures=str(len(failures)),
            time=f"{sum(r['wall_s'] for r in results):.3f}",
        )
        for r in sorted(results, key=lambda r: r["seed"]):
            case = ET.SubElement(suite, "testcase", classname=f"{scenario}.{profile}",
                                 name=f"seed-{r['seed']}", time=f"{r['wall_s']:.3f}")
            if r["verdict"] != "ok":
                fail = ET.SubElement(case, "failure", type=str(r["invariant"]),
                                     message=str(r["message"]))
                fail.text = f"replay: {r['replay']}"
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1d2330}
h1{font-size:1.4rem} table{border-collapse:collapse;margin:1rem 0}
td,th{border:1px solid #ccd;padding:.25rem .6rem;text-align:left;font-size:.9rem}
th{background:#eef} .bad{background:#fdd;font-weight:bold} .ok{color:#176b2c}
.heat td.n{text-align:right} code{background:#f4f4f8;padding:0 .2rem}
.lane{display:flex;align-items:center;margin:2px 0}
.lane .name{width:7rem;font-size:.8rem}
.lane .track{position:relative;flex:1;height:18px;background:#f4f5fa;border-radius:3px}
.mark{position:absolute;top:2px;width:6px;height:14px;border-radius:2px;cursor:pointer}
.fault{background:#e8a317}.crash{background:#c62828;width:4px}.tx{background:#3a6ea5}
.hop{background:#2e7d32}.client{background:#7b1fa2}.violation{background:#000;width:8px}
#history{white-space:pre;font-family:monospace;font-size:.8rem;background:#f6f6fa;padding:.5rem}
"""


def _page(title: str, body: str, script: str = "") -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}<script>{script}</script></body></html>\n"
    )


def campaign_html(doc: dict[str, Any], pages: dict[tuple[str, int], str] | None = None) -> str:
    """The campaign page; `pages` maps (scenario, seed) to the href of its replay page."""
    from harness.pages import scenario_grid

    pages = pages or {}

    def page_link(v: dict[str, Any]) -> str:
        href = pages.get((str(v["scenario"]), int(v["seed"])))
        return f" <a class=replay-page href='{html.escape(href)}'>replay page</a>" if href else ""

    rows = "".join(
        f"<tr class=bad data-invariant='{html.escape(str(v['invariant']))}'>"
        f"<td>{html.escape(str(v['invariant']))}</td><td>{v['seed']}</td>"
        f"<td>{html.escape(str(v['scenario']))}</td><td>{html.escape(str(v['message']))}</td>"
        f"<td><code>{html.escape(v['replay'])}</code>{page_link(v)}</td></tr>"
        for v in doc["violations"]
    ) or "<tr><td colspan=5 class=ok>every invariant held</td></tr>"
    points = doc["coverage"]["points"]
    top = max([c["fires"] for c in points.values()] + [1])
    heat = "".join(
        f"<tr><td>{html.escape(p)}</td><td class=n>{c['hits']}</td>"
        f"<td class=n style='background:rgba(198,40,40,{c['fires'] / top:.2f})'>{c['fires']}</td>"
        f"<td>{'catalogued' if p in CATALOGUE else 'seam'}</td></tr>"
        for p, c in points.items()
    )
    by_inv = "".join(
        f"<tr class=bad id='inv-{html.escape(k)}'><td>{html.escape(k)}</td><td>{n}</td>"
        f"<td>{html.escape(INVARIANTS[k].rule if k in INVARIANTS else k)}</td></tr>"
        for k, n in doc["violations_by_invariant"].items()
    )
    ratio = doc["virtual_s"] / doc["wall_s"] if doc["wall_s"] else 0
    body = (
        f"<h1>Campaign: {html.escape(', '.join(doc['scenarios']))} ({doc['profile']})</h1>"
        f"<p id=totals>{_verdict_html(doc)} {_simulations(doc)}, "
        f"{doc['runs_simulated']} Runs simulated, "
        f"{doc['virtual_s']:,.0f} virtual s in {doc['wall_s']:,.1f} wall s "
        f"({ratio:,.0f}x).</p>"
        f"<h2>Violations by invariant</h2><table><tr><th>invariant</th><th>seeds</th>"
        f"<th>rule</th></tr>{by_inv or '<tr><td colspan=3 class=ok>none</td></tr>'}</table>"
        f"<h2>Violations</h2><table><tr><th>invariant</th><th>seed</th><th>scenario</th>"
        f"<th>message</th><th>replay</th></tr>{rows}</table>"
        f"<h2>Fault-point coverage</h2><table class=heat><tr><th>point</th><th>hits</th>"
        f"<th>fires</th><th>kind</th></tr>{heat}</table>"
        f"<p>Coverage gaps: {html.escape(', '.join(doc['coverage_gaps']) or 'none')}</p>"
        f"{scenario_grid(doc['results'])}"
    )
    return _page("harness campaign", body)


def _simulations(doc: dict[str, Any]) -> str:
    """`330 simulations (11 scenarios x 30 seeds)`: never a simulation count called seeds."""
    n = doc.get("simulations", doc["seeds"])
    scenarios = len(doc.get("by_scenario") or doc["scenarios"])
    return f"{n} simulations ({scenarios} scenarios x {doc['seeds']} seeds)"


def _verdict_html(doc: dict[str, Any]) -> str:
    verdict = str(doc.get("verdict", "fail" if doc["violations"] else "pass"))
    css = "ok" if verdict == "pass" else "bad"
    return f"<span class={css} id=verdict>{html.escape(verdict.upper())}</span>"


def replay_html(result: SimResult, replay: str | None = None, shrink: str | None = None) -> str:
    """The replay page: time axis, legend, actor and Run lanes (`harness.pages`)."""
    from harness.pages import replay_html as page

    return page(result, replay, shrink)


def _run_of(record: dict[str, Any]) -> str | None:
    data = record["data"]
    for key in ("run_id", "run"):
        if data.get(key):
            return str(data[key])
    k = data.get("key")
    if isinstance(k, str) and k.startswith("run:"):
        return k.split(":")[1]
    ident = data.get("identity")
    if isinstance(ident, str):
        return ident.split(":")[0]
    return None


def _cls(record: dict[str, Any]) -> str:
    event = record["event"]
    if event == "violation":
        return "violation"
    if event == "boot.crash":
        return "crash"
    if event.startswith("fault"):
        return "fault"
    if record["actor"] == "client":
        return "client"
    if event.startswith("job.") or event.startswith("effect"):
        return "hop"
    return "tx"


def gate_junit(result: Any) -> str:
    suites = ET.Element("testsuites", name="harness gate")
    by_suite: dict[str, list[Any]] = {}
    for c in result.checks:
        by_suite.setdefault(c.suite, []).append(c)
    for name, checks in by_suite.items():
        suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(checks)),
                              failures=str(sum(not c.ok for c in checks)))
        for c in checks:
            case = ET.SubElement(suite, "testcase", classname=f"gate.{name}", name=c.name,
                                 time=f"{c.seconds:.3f}")
            if not c.ok:
                fail = ET.SubElement(case, "failure", message=c.detail)
                fail.text = f"replay: {c.replay}" if c.replay else c.detail
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def gate_json(result: Any) -> dict[str, Any]:
    return {
        "ship": result.ship,
        "code_digest": result.digest,
        "wall_s": result.wall_s,
        "checks": [
            {"suite": c.suite, "name": c.name, "ok": c.ok, "detail": c.detail,
             "replay": c.replay}
            for c in result.checks
        ],
        "violations": result.violations,
        "fires_per_point": result.coverage,
        "break_sweep": getattr(result, "sweep", None),
    }


def _sweep_markdown(sweep: dict[str, Any] | None) -> list[str]:
    """The break sweep: seeds to detection per break of the rule catalogue."""
    if not sweep:
        return []
    median = sweep.get("median_seeds_to_detection")
    lines = ["### Break sweep", "",
             f"{len(sweep['breaks'])} breaks, {len(sweep['survivors'])} survived, median "
             f"seeds to detection {median if median is not None else '-'}, "
             f"{sweep['wall_s']:.0f}s.", "",
             "| break | rule | scenario | caught at seed | seeds tried | seconds |",
             "|---|---|---|---|---|---|"]
    for b in sweep["breaks"]:
        caught = str(b["caught_at"]) if b["caught"] else f"SURVIVED {b['skipped']}".strip()
        lines.append(f"| {b['name']} | {b['rule']} | {b['scenario']} | {caught} | "
                     f"{b['seeds_tried']} | {b['wall_s']:.1f} |")
    return [*lines, ""]


def gate_markdown(result: Any) -> str:
    verdict = "SHIP" if result.ship else "DO NOT SHIP"
    lines = [f"## Release gate: {verdict}", "",
             f"Code digest `{result.digest[:16]}`; {len(result.checks)} checks in "
             f"{result.wall_s:.0f}s.", ""]
    failed = [c for c in result.checks if not c.ok]
    if failed:
        lines += ["### Failed", "", "| suite | check | detail | replay |", "|---|---|---|---|"]
        for c in failed:
            replay = f"`{c.replay}`" if c.replay else ""
            lines.append(f"| {c.suite} | {c.name} | {c.detail} | {replay} |")
        lines.append("")
    if result.violations:
        lines += ["### Violations", "", "| invariant | scenario | seed | message | replay |",
                  "|---|---|---|---|---|"]
        for v in result.violations[:50]:
            lines.append(f"| {v['invariant']} | {v['scenario']} | {v['seed']} | "
                         f"{v['message']} | `{v['replay']}` |")
        lines.append("")
    lines += _sweep_markdown(getattr(result, "sweep", None))
    lines += ["### Checks", "", "| suite | passed | failed |", "|---|---|---|"]
    suites: dict[str, list[Any]] = {}
    for c in result.checks:
        suites.setdefault(c.suite, []).append(c)
    for name, checks in suites.items():
        lines.append(f"| {name} | {sum(c.ok for c in checks)} | "
                     f"{sum(not c.ok for c in checks)} |")
    return "\n".join(lines) + "\n"
