"""The replay page and the campaign page's grid, for people reading them (issue M15).

Replay (`replay_html`): a time axis in virtual seconds and a legend, one
lane per boot or actor and one per Run, labelled marks (faults, crashes,
the violation carry their name on the track), the list of fired faults,
the violating Run's record history shown at once (a click on any mark
shows that Run's), and the replay and shrink commands to copy.

Campaign (`scenario_grid`, `violation_links`): fires per scenario and
fault point, and a link to the replay page written for each violation.

Self-contained HTML: no network, one small script.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from typing import Any

from harness.report import _STYLE, _cls, _run_of
from sim.kernel import SimResult

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

_MORE_STYLE = """
.axis{position:relative;height:1.2rem;margin-left:9rem;border-top:1px solid #99a;font-size:.7rem}
.axis span{position:absolute;top:2px;transform:translateX(-50%);color:#556}
.lane .name{width:9rem;font-size:.8rem;overflow:hidden;text-overflow:ellipsis}
.lane.run .name{font-family:monospace}
.label{position:absolute;top:-1px;font-size:.65rem;white-space:nowrap;margin-left:8px;
 color:#333;pointer-events:none}
.legend span{display:inline-flex;align-items:center;margin-right:1rem;font-size:.8rem}
.legend i{display:inline-block;width:10px;height:10px;margin-right:.3rem;border-radius:2px}
.cmd{display:block;margin:.3rem 0;padding:.4rem;background:#f4f4f8;user-select:all;
 white-space:pre-wrap;word-break:break-all}
.grid td.n{text-align:right} .grid td.zero{color:#aab}
"""

LEGEND = (("tx", "ledger transaction"), ("hop", "job or effect"), ("client", "client call"),
          ("fault", "fault fired"), ("crash", "boot crash"), ("violation", "violation"))


def _lane_of(record: dict[str, Any]) -> str:
    if record["actor"] in ("world", "broker", "relay"):
        return f"boot {record['boot']}"
    return str(record["actor"])


def _label(record: dict[str, Any]) -> str:
    """The text written on the track for the marks a reader looks for first."""
    kind = _cls(record)
    data = record.get("data") or {}
    if kind == "fault":
        return str(data.get("fault") or data.get("point") or record["event"])
    if kind == "crash":
        return f"crash boot {record['boot']}"
    if kind == "violation":
        return str(data.get("invariant") or "violation")
    return ""


def _mark(record: dict[str, Any], end: float, labelled: bool) -> str:
    left = 100 * record["t"] / end
    title = f"{record['event']} t={record['t']:g}s boot {record['boot']}"
    label = _label(record) if labelled else ""
    text = (f"<span class=label style='left:{left:.3f}%'>{html.escape(label)}</span>"
            if label else "")
    return (f"<span class='mark {_cls(record)}' style='left:{left:.3f}%' "
            f"title='{html.escape(title)}' aria-label='{html.escape(title)}' "
            f"data-run='{html.escape(_run_of(record) or '')}'></span>{text}")


def _lane(name: str, records: Iterable[dict[str, Any]], end: float, css: str = "",
          labelled: bool = True) -> str:
    marks = "".join(_mark(r, end, labelled) for r in records)
    return (f"<div class='lane {css}'><span class=name title='{html.escape(name)}'>"
            f"{html.escape(name)}</span><div class=track>{marks}</div></div>")


def _axis(end: float) -> str:
    step = _nice_step(end / 8)
    ticks = []
    t = 0.0
    while t <= end + 1e-9:
        ticks.append(f"<span style='left:{100 * t / end:.3f}%'>{t:g}s</span>")
        t += step
    return f"<div class=axis aria-label='virtual time'>{''.join(ticks)}</div>"


def _nice_step(raw: float) -> float:
    for unit in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600):
        if unit >= raw:
            return float(unit)
    return 3600.0 * max(1, round(raw / 3600))


def _legend() -> str:
    items = "".join(f"<span><i class='{css}'></i>{html.escape(text)}</span>"
                    for css, text in LEGEND)
    return f"<p class=legend>{items}</p>"


def _violating_run(result: SimResult, histories: dict[str, list[str]]) -> str | None:
    v = result.violation
    if v is None:
        return None
    text = v.message + " " + json.dumps(v.records, sort_keys=True, default=str)
    for rid in _UUID.findall(text):
        if rid in histories:
            return str(rid)
    return None


def default_commands(result: SimResult) -> tuple[str, str]:
    """The replay and shrink commands of this seed (without any SIM_BREAK prefix)."""
    where = f"--seed {result.seed} --scenario {result.scenario} --profile {result.profile}"
    return f"harness replay {where}", f"harness shrink {where} --emit-test test_seed.py"


def replay_html(result: SimResult, replay: str | None = None, shrink: str | None = None) -> str:
    """The replay page (see the module docstring)."""
    records = [json.loads(line) for line in result.trace_lines]
    end = max([r["t"] for r in records] + [1.0])
    actors: dict[str, list[dict[str, Any]]] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    histories: dict[str, list[str]] = {}
    for r in records:
        actors.setdefault(_lane_of(r), []).append(r)
        rid = _run_of(r)
        if rid:
            runs.setdefault(rid, []).append(r)
            data = json.dumps(r["data"], sort_keys=True)
            histories.setdefault(rid, []).append(
                f"t={r['t']:g} boot {r['boot']} {r['event']} {data}")
    bad_run = _violating_run(result, histories)
    lanes = [_lane(name, recs, end) for name, recs in actors.items()]
    lanes += [_lane(f"Run {rid[:8]}", recs, end, "run" + (" bad" if rid == bad_run else ""),
                    labelled=False)
              for rid, recs in runs.items()]
    v = result.violation
    verdict = (
        f"<div class=bad id='violation' data-invariant='{html.escape(v.invariant)}'>"
        f"violated: {html.escape(v.invariant)}: {html.escape(v.message)}</div>"
        if v else f"<div class=ok id=verdict>verdict: {html.escape(result.verdict)}</div>"
    )
    default_replay, default_shrink = default_commands(result)
    faults = "".join(f"<li>{html.escape(pf.describe())}</li>" for pf in result.fired.faults)
    shown = (f"Run {bad_run} (the violating Run)\n" + "\n".join(histories[bad_run])
             if bad_run else "Click a mark to see its Run's record history.")
    body = (
        f"<h1>Replay: {html.escape(result.scenario)} seed {result.seed} ({result.profile})</h1>"
        f"<p>trace-hash <code>{result.trace_hash}</code>; {result.runs} Runs, "
        f"{result.boots} boots, {len(result.fired.faults)} faults; {end:g} virtual s.</p>"
        f"{verdict}"
        "<h2>Commands</h2>"
        f"<code class=cmd id=replay-command>{html.escape(replay or default_replay)}</code>"
        f"<code class=cmd id=shrink-command>{html.escape(shrink or default_shrink)}</code>"
        f"<h2>Timeline</h2>{_legend()}{_axis(end)}<div id=lanes>{''.join(lanes)}</div>"
        f"<h2>Record history</h2><div id=history>{html.escape(shown)}</div>"
        f"<h2>Fired faults ({len(result.fired.faults)})</h2>"
        f"<ol id=faults>{faults or '<li>none</li>'}</ol>"
    )
    script = (
        f"const H={json.dumps(histories, sort_keys=True)};"
        "document.querySelectorAll('.mark').forEach(m=>m.addEventListener('click',()=>{"
        "const r=m.dataset.run;document.getElementById('history').textContent="
        "r?('Run '+r+'\\n'+(H[r]||[]).join('\\n')):m.title;}));"
    )
    return _page(f"replay seed {result.seed}", body, script)


def scenario_grid(results: list[dict[str, Any]]) -> str:
    """A table: one row per fault point, one column per scenario, fires in each cell."""
    scenarios = sorted({r["scenario"] for r in results})
    fires: dict[tuple[str, str], int] = {}
    for r in results:
        for point, n in (r.get("fires") or r.get("coverage", {}).get("fires", {})).items():
            fires[(point, r["scenario"])] = fires.get((point, r["scenario"]), 0) + n
    points = sorted({p for p, _ in fires})
    head = "".join(f"<th>{html.escape(s)}</th>" for s in scenarios)
    rows = "".join(
        f"<tr><td>{html.escape(p)}</td>" + "".join(
            f"<td class='n{'' if fires.get((p, s)) else ' zero'}'>{fires.get((p, s), 0)}</td>"
            for s in scenarios) + "</tr>"
        for p in points
    )
    return (f"<h2>Fires per scenario and fault point</h2><table class=grid id=grid>"
            f"<tr><th>point</th>{head}</tr>{rows}</table>")


def _page(title: str, body: str, script: str = "") -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}{_MORE_STYLE}</style></head>"
        f"<body>{body}<script>{script}</script></body></html>\n"
    )
