"""The gate's proving of receipts: every window's lifecycle and every check runs,
each recorded as one receipts-run check; a window passes unless its verdict is
`failed` (a window a build cannot reach is `skipped`), a check only when `proved`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness import gate


def test_each_window_and_check_is_one_receipts_run_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.pg
    import harness.receipts.index
    import harness.receipts.leased_checks
    import harness.receipts.lifecycle
    import harness.receipts.selection

    windows = [SimpleNamespace(point=p) for p in ("w.failed", "w.skipped", "w.proved")]
    checks = [SimpleNamespace(name=n, kind="leased") for n in ("c.failed", "c.skipped")]
    verdicts = {"w.failed": "failed", "w.skipped": "skipped", "w.proved": "proved",
                "c.failed": "failed", "c.skipped": "skipped"}

    @contextmanager
    def provision() -> Iterator[Any]:
        yield SimpleNamespace(dsn="postgresql://nowhere")

    def prove(window: Any, dsn: str, root: Path) -> dict[str, Any]:
        return {"verdict": verdicts[window.point], "problems": ["p1", "p2"]}

    def run_check(check: Any, dsn: str, root: Path) -> dict[str, Any]:
        return {"verdict": verdicts[check.name], "reason": f"{check.name} said so"}

    monkeypatch.setattr(harness.pg, "provision", provision)
    monkeypatch.setattr(harness.receipts.lifecycle, "prove", prove)
    monkeypatch.setattr(harness.receipts.leased_checks, "run_check", run_check)
    monkeypatch.setattr(harness.receipts.selection, "choose",
                        lambda *a, **k: (windows, checks))
    monkeypatch.setattr(harness.receipts.index, "write_index", lambda root: None)
    policy = gate.Policy.model_validate({
        "require_receipts": True, "require_leased": False, "require_vessels": False,
        "campaign": [{"scenarios": "basic", "profile": "default", "seeds": "1"}],
    })
    result = gate.GateResult()
    gate._prove_receipts(policy, tmp_path, result)
    assert [(c.suite, c.name, c.ok, c.detail) for c in result.checks] == [
        ("receipts-run", "w.failed", False, "p1; p2"),
        ("receipts-run", "w.skipped", True, "p1; p2"),
        ("receipts-run", "w.proved", True, "p1; p2"),
        ("receipts-run", "c.failed", False, "c.failed said so"),
        ("receipts-run", "c.skipped", False, "c.skipped said so"),
    ]
    assert all(c.seconds >= 0 for c in result.checks)
