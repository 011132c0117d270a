"""The index of all receipts: proved, failed, stale or missing (index.json, .md, .html).

Three sections. `windows`: every catalogued crash window (runtime.faults
CATALOGUE) with its two-boot restart receipt, or, when no Vessel lifecycle
reaches it, the leased-job receipt that names it in `proves` (its
`proved_by`). `leased`: every real-process check of leased delegated jobs
(seed 004, harness.receipts.leased_checks). `vessels`: every check of several
Vessels on one database (issue 15, harness.receipts.vessels). A receipt proved on other code
(its `code_digest` differs from this code's) is `stale`.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from harness.catalogue_check import code_digest
from harness.receipts.leased_checks import LEASED_CHECKS, LeasedCheck
from harness.receipts.vessels import VESSEL_CHECKS
from runtime.faults import CATALOGUE

LEASED_TITLE = "leased jobs (seed 004)"
VESSELS_TITLE = "several Vessels on one database (issue 15)"


def _verdict(doc: dict[str, Any] | None, digest: str) -> str:
    if doc is None:
        return "missing"
    verdict = str(doc.get("verdict", "failed"))
    if verdict == "proved" and doc.get("code_digest") != digest:
        return "stale"
    return verdict


def _reason(doc: dict[str, Any] | None) -> str:
    doc = doc or {}
    return str(doc.get("reason") or "; ".join(doc.get("problems", [])))


def write_index(out: Path, leased: bool = True) -> dict[str, Any]:
    """Write index.json, .md and .html over the receipts in `out`; `leased=False`
    leaves the leased-job section empty (an app's receipts have none)."""
    receipts: dict[str, dict[str, Any]] = {}
    for path in sorted(out.glob("*.json")):
        if path.name == "index.json":
            continue
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and "window" in doc:
            receipts[doc["window"]] = doc
    digest = code_digest()
    windows = []
    for point in CATALOGUE:
        doc = receipts.get(point)
        proved_by = None
        if doc is None or doc.get("verdict") == "missing":  # no Vessel lifecycle reaches it
            by = [receipts[name] for name in LEASED_CHECKS
                  if name in receipts and receipts[name].get("proves") == point]
            if by:
                doc, proved_by = by[0], by[0]["window"]
        boots = (doc or {}).get("boots") or []
        windows.append({
            "window": point, "verdict": _verdict(doc, digest),
            "code_digest": doc.get("code_digest") if doc else None,
            "reason": _reason(doc), "proved_by": proved_by,
            "pids": [b.get("pid") for b in boots]
            or [p.get("pid") for p in (doc or {}).get("processes", [])],
            "boot1_signal": (boots or [{}])[0].get("exit_signal"),
            "files": receipt_files(out, proved_by or point),
        })
    index = {"code_digest": digest, "windows": windows,
             "leased": _checks(out, LEASED_CHECKS if leased else {}, receipts, digest),
             "vessels": _checks(out, VESSEL_CHECKS if leased else {}, receipts, digest)}
    (out / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (out / "index.md").write_text(_markdown(index))
    (out / "index.html").write_text(_html(index))
    return index


def _checks(out: Path, registry: dict[str, LeasedCheck], receipts: dict[str, dict[str, Any]],
            digest: str) -> list[dict[str, Any]]:
    checks = []
    for name, check in registry.items():
        doc = receipts.get(name)
        checks.append({
            "check": name, "verdict": _verdict(doc, digest), "scenario": check.scenario,
            "proves": check.proves, "code_digest": doc.get("code_digest") if doc else None,
            "reason": _reason(doc), "seconds": (doc or {}).get("seconds"),
            "pids": [p.get("pid") for p in (doc or {}).get("processes", [])],
            "files": receipt_files(out, name),
        })
    return checks


def receipt_files(out: Path, name: str) -> dict[str, Any]:
    """The receipt's JSON and its process logs, relative to the index (for links)."""
    receipt = out / f"{name}.json"
    logs = sorted(p.relative_to(out).as_posix() for p in (out / name).glob("*.log"))
    return {"json": receipt.name if receipt.exists() else None, "logs": logs}


def totals(entries: list[dict[str, Any]]) -> str:
    """`21 proved, 1 missing` (verdicts in a fixed order)."""
    counts = {v: sum(e["verdict"] == v for e in entries) for v in COLOUR}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n) or "none"


def _links(entry: dict[str, Any]) -> str:
    files = entry.get("files") or {}
    links = [f"<a href='{html.escape(files['json'])}'>json</a>"] if files.get("json") else []
    links += [f"<a href='{html.escape(log)}'>{html.escape(log.rsplit('/', 1)[-1])}</a>"
              for log in files.get("logs", [])]
    return " ".join(links)


def _pids(entry: dict[str, Any]) -> str:
    return ", ".join(str(p) for p in entry["pids"] if p)


def _note(entry: dict[str, Any]) -> str:
    by = f"by {entry['proved_by']}" if entry.get("proved_by") else ""
    return "; ".join(x for x in (by, entry["reason"]) if x)


def _markdown(index: dict[str, Any]) -> str:
    lines = ["# Restart receipts", "", f"Code digest `{index['code_digest'][:16]}`.", "",
             f"Windows: {totals(index['windows'])}. Leased checks: {totals(index['leased'])}. "
             f"Vessel checks: {totals(index.get('vessels', []))}.",
             "",
             "| window | verdict | boot 1 | pids | note |", "|---|---|---|---|---|"]
    for w in index["windows"]:
        lines.append(f"| {w['window']} | {w['verdict']} | {w['boot1_signal'] or ''} "
                     f"| {_pids(w)} | {_note(w)} |")
    for title, section in ((LEASED_TITLE, "leased"), (VESSELS_TITLE, "vessels")):
        lines += ["", f"## {title[0].upper()}{title[1:]}", "",
                  "| check | verdict | proves | seconds | pids | scenario | note |",
                  "|---|---|---|---|---|---|---|"]
        for c in index.get(section, []):
            lines.append(f"| {c['check']} | {c['verdict']} | {c['proves'] or ''} "
                         f"| {c['seconds'] if c['seconds'] is not None else ''} | {_pids(c)} "
                         f"| {c['scenario']} | {c['reason']} |")
    return "\n".join(lines) + "\n"


COLOUR = {"proved": "#dff3e3", "failed": "#fdd", "missing": "#eee", "stale": "#fff3cd"}


def _row(verdict: str, cells: list[str], links: str = "") -> str:
    tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
    return (f"<tr style='background:{COLOUR.get(verdict, '#fff')}'>{tds}"
            f"<td class=files>{links}</td></tr>")


def _html(index: dict[str, Any]) -> str:
    rows = "".join(
        _row(w["verdict"], [w["window"], w["verdict"], str(w["boot1_signal"] or ""), _pids(w),
                            _note(w)], _links(w))
        for w in index["windows"]
    )
    leased, vessels = (
        "".join(
            _row(c["verdict"], [c["check"], c["verdict"], c["proves"] or "",
                                "" if c["seconds"] is None else str(c["seconds"]), _pids(c),
                                c["scenario"], c["reason"]], _links(c))
            for c in index.get(section, [])
        )
        for section in ("leased", "vessels")
    )
    head = ("<tr><th>check</th><th>verdict</th><th>proves</th><th>seconds</th><th>pids</th>"
            "<th>scenario</th><th>note</th><th>receipt and logs</th></tr>")
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>Restart receipts</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:1.5rem}td,th{border:1px solid #ccd;"
        "padding:.3rem .6rem}table{border-collapse:collapse}</style></head><body>"
        f"<h1>Restart receipts</h1><p>Code digest <code>{index['code_digest'][:16]}</code></p>"
        f"<p id=totals>Windows: {totals(index['windows'])}. "
        f"Leased checks: {totals(index['leased'])}. "
        f"Vessel checks: {totals(index.get('vessels', []))}.</p>"
        "<table><tr><th>window</th><th>verdict</th><th>boot 1 ended by</th><th>pids</th>"
        f"<th>note</th><th>receipt and logs</th></tr>{rows}</table>"
        f"<h2>{html.escape(LEASED_TITLE[0].upper() + LEASED_TITLE[1:])}</h2>"
        f"<table>{head}{leased}</table>"
        f"<h2>{html.escape(VESSELS_TITLE[0].upper() + VESSELS_TITLE[1:])}</h2>"
        f"<table id=vessels>{head}{vessels}</table>"
        "</body></html>\n"
    )
