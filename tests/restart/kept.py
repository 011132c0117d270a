"""Proved receipts kept for the gate: with `HARNESS_RECEIPTS_OUT=DIR` (set by
`.ci/run`) a restart test copies each receipt it proved, with its process
logs, into DIR, the gate's receipts folder; `harness gate --reuse-receipts`
then checks them instead of proving every window and leased check again."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ENV = "HARNESS_RECEIPTS_OUT"


def keep(root: Path, name: str) -> None:
    """Copy `root/<name>.json` and `root/<name>/` (logs) to $HARNESS_RECEIPTS_OUT, if set."""
    folder = os.environ.get(ENV)
    if not folder:
        return
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / f"{name}.json", target / f"{name}.json")
    logs = root / name
    if logs.is_dir():
        shutil.copytree(logs, target / name, dirs_exist_ok=True)
