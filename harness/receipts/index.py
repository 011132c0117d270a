"""The index of all windows: proved, failed or missing (index.json, .md, .html)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from harness.catalogue_check import code_digest
from runtime.faults import CATALOGUE


def write_index(out: Path) -> dict[str, Any]:
    receipts = {}
    for path in sorted(out.glob("*.json")):
        if path.name == "index.json":
            continue
        doc = json.loads(path.read_text())
        receipts[doc["window"]] = doc
    digest = code_digest()
    windows = []
    for point in CATALOGUE:
        doc = receipts.get(point)
        verdict = doc["verdict"] if doc else "missing"
        if doc and doc.get("code_digest") != digest and verdict == "proved":
            verdict = "stale"
        windows.append({
            "window": point, "verdict": verdict,
            "code_digest": doc.get("code_digest") if doc else None,
            "reason": (doc or {}).get("reason") or "; ".join((doc or {}).get("problems", [])),
            "pids": [b.get("pid") for b in (doc or {}).get("boots", [])],
            "boot1_signal": ((doc or {}).get("boots") or [{}])[0].get("exit_signal"),
        })
    index = {"code_digest": digest, "windows": windows}
    (out / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (out / "index.md").write_text(_markdown(index))
    (out / "index.html").write_text(_html(index))
    return index


def _markdown(index: dict[str, Any]) -> str:
    lines = ["# Restart receipts", "", f"Code digest `{index['code_digest'][:16]}`.", "",
             "| window | verdict | boot 1 | pids | note |", "|---|---|---|---|---|"]
    for w in index["windows"]:
        pids = ", ".join(str(p) for p in w["pids"] if p)
        lines.append(f"| {w['window']} | {w['verdict']} | {w['boot1_signal'] or ''} | {pids} "
                     f"| {w['reason']} |")
    return "\n".join(lines) + "\n"


def _html(index: dict[str, Any]) -> str:
    colour = {"proved": "#dff3e3", "failed": "#fdd", "missing": "#eee", "stale": "#fff3cd"}
    rows = "".join(
        f"<tr style='background:{colour.get(w['verdict'], '#fff')}'>"
        f"<td>{html.escape(w['window'])}</td><td>{w['verdict']}</td>"
        f"<td>{html.escape(str(w['boot1_signal'] or ''))}</td>"
        f"<td>{html.escape(', '.join(str(p) for p in w['pids'] if p))}</td>"
        f"<td>{html.escape(w['reason'])}</td></tr>"
        for w in index["windows"]
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>Restart receipts</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:1.5rem}td,th{border:1px solid #ccd;"
        "padding:.3rem .6rem}table{border-collapse:collapse}</style></head><body>"
        f"<h1>Restart receipts</h1><p>Code digest <code>{index['code_digest'][:16]}</code></p>"
        "<table><tr><th>window</th><th>verdict</th><th>boot 1 ended by</th><th>pids</th>"
        f"<th>note</th></tr>{rows}</table></body></html>\n"
    )
