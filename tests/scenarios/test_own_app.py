"""Acceptance of M13: a new user, following only the README guide "Test your own
workflows", writes a Pattern and a workload outside the repository, runs
`harness campaign --app`, sees the deliberately buggy charge caught with a
replay command, shrinks it, and the emitted regression test fails on the bug
and passes once the node is fixed.

The guide's files are taken from the README itself (the blocks marked
`<!-- file: path -->`), and its fix is the one line the guide shows, so the
guide cannot drift from what works.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BUG = 'idempotency_key=None'
FIX = 'idempotency_key=ctx.effect_identity("charge")'
REPLAY = re.compile(r"^\s*(harness replay --app mystore\.sim:app --seed (\d+) --profile default)$",
                    re.MULTILINE)


def guide_files() -> dict[str, str]:
    text = README.read_text()
    section = text.split("## Test your own workflows", 1)[1].split("\n## ", 1)[0]
    files = dict(re.findall(r"<!-- file: (\S+) -->\n```python\n(.*?)```", section, re.DOTALL))
    assert set(files) == {"mystore/flows.py", "mystore/sim.py"}, files.keys()
    assert BUG in files["mystore/flows.py"] and FIX in section
    return files


def _tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SIM_BREAK")}
    return subprocess.run([_tool(args[0]), *args[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_new_user_catches_shrinks_and_fixes_a_non_idempotent_charge(tmp_path: Path) -> None:
    assert ROOT not in tmp_path.parents
    for rel, body in guide_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    (tmp_path / "mystore" / "__init__.py").write_text("")

    found = _run(tmp_path, "harness", "campaign", "--app", "mystore.sim:app", "--seeds", "1-8")
    assert found.returncode == 1, found.stdout + found.stderr
    assert "charged_once" in found.stdout
    replays = REPLAY.findall(found.stdout)
    assert replays, found.stdout
    command, seed = replays[0]

    again = _run(tmp_path, *shlex.split(command))
    assert again.returncode == 1, again.stdout + again.stderr
    assert "verdict: violation [charged_once] charged twice" in again.stdout

    test_file = f"test_mystore_seed_{seed}.py"
    shrunk = _run(tmp_path, "harness", "shrink", "--app", "mystore.sim:app", "--seed", seed,
                  "--emit-test", test_file)
    assert shrunk.returncode == 1, shrunk.stdout + shrunk.stderr
    assert "invariant: charged_once" in shrunk.stdout
    assert "load_app('mystore.sim:app')" in (tmp_path / test_file).read_text()

    on_bug = _run(tmp_path, "pytest", "-q", "-p", "no:cacheprovider", test_file)
    assert on_bug.returncode == 1, on_bug.stdout + on_bug.stderr
    assert "charged_once" in on_bug.stdout

    flows = tmp_path / "mystore" / "flows.py"
    flows.write_text(flows.read_text().replace(BUG, FIX))
    on_fix = _run(tmp_path, "pytest", "-q", "-p", "no:cacheprovider", test_file)
    assert on_fix.returncode == 0, on_fix.stdout + on_fix.stderr

    fixed = _run(tmp_path, "harness", "campaign", "--app", "mystore.sim:app", "--seeds", "1-8")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
