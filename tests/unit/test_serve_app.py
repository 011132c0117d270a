"""`vessel serve --app` and `harness receipts --app` window selection (issue 16).

The runtime takes the object `--app` names by shape (it never imports the
harness): a WorkflowRegistry, something with `serve_registry()` or a
`registry` attribute, or a function returning one. Anything else is one line
and exit status 2 before anything is bound. For receipts, the simulator tells
which sample of the app's workload reaches which window.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from runtime.app.cli import cli
from runtime.app.registry_ref import RegistryRefError, load_registry
from runtime.registry import WorkflowRegistry

SHOP = Path(__file__).resolve().parents[2] / "examples" / "shop"

MODULE = '''
from runtime.patterns import default_registry

registry = default_registry()

class Holder:
    registry = registry

class Serves:
    def serve_registry(self):
        return registry

holder = Holder()
serves = Serves()

def factory():
    return serves

not_one = 42

class Wrong:
    def serve_registry(self):
        return "nope"

wrong = Wrong()
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "userflows_m13.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "userflows_m13"
    sys.modules.pop("userflows_m13", None)


@pytest.mark.parametrize("attr", ["registry", "holder", "serves", "factory"])
def test_every_shape_of_app_gives_its_registry(user_module: str, attr: str) -> None:
    found = load_registry(f"{user_module}:{attr}")
    assert isinstance(found, WorkflowRegistry) and "echo" in found.names()


@pytest.mark.parametrize(("ref", "says"), [
    ("no_colon", "use module:attribute"),
    ("surely_not_a_module_m13:app", "cannot import"),
    ("{mod}:missing", "has no attribute missing"),
    ("{mod}:not_one", "a int is not a WorkflowRegistry"),
    ("{mod}:wrong", "serve_registry() returned a str"),
])
def test_a_ref_that_names_no_registry_is_one_clear_line(
    user_module: str, ref: str, says: str
) -> None:
    with pytest.raises(RegistryRefError) as caught:
        load_registry(ref.format(mod=user_module))
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_vessel_serve_refuses_a_bad_app_with_exit_2(user_module: str) -> None:
    result = CliRunner().invoke(
        cli, ["serve", "--memory", "--app", f"{user_module}:not_one"],
        env={"VESSEL_TOKEN": "t", "VESSEL_TOKENS": None, "VESSEL_CRASH_AT": None})
    assert result.exit_code == 2
    assert "is not a WorkflowRegistry" in result.output


def test_the_example_app_serves_its_own_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(SHOP)
    monkeypatch.syspath_prepend(str(SHOP))
    assert load_registry("shop.sim:app").names() == ["checkout"]


def test_receipt_windows_are_bound_to_samples_that_reach_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.api import load_app
    from harness.receipts.app import app_windows

    monkeypatch.chdir(SHOP)
    monkeypatch.syspath_prepend(str(SHOP))
    app = load_app("shop.sim:app")
    names = ["admit.committed", "consent.row_saved", "cancel.contained", "effect.applied",
             "release.committed"]
    got: dict[str, Any] = {w.point: w for w in app_windows(app, names)}
    assert list(got) == names
    for point in ("admit.committed", "consent.row_saved", "cancel.contained"):
        w = got[point]
        assert w.unreachable is None and w.pattern == "checkout" and w.app == "shop.sim:app"
        assert w.serve_args() == ("--app", "shop.sim:app")
    limit = 50_000  # shop.checkout.APPROVAL_LIMIT_CENTS: above it, the order waits on consent
    assert got["consent.row_saved"].content["amount_cents"] > limit
    assert got["cancel.contained"].content["amount_cents"] > limit
    assert "no sample" in str(got["effect.applied"].unreachable)
    assert "HELD" in str(got["release.committed"].unreachable)
    with pytest.raises(KeyError, match="unknown windows"):
        app_windows(app, ["no.such.window"])


@pytest.mark.parametrize(("args", "says"), [
    (["--app", "surely_not_a_module_m13:app"], "cannot import"),
    (["--app", "tests.unit.api_app:app", "--window", "no.such.window"], "unknown windows"),
])
def test_receipts_app_mistakes_are_one_line_and_exit_2(
    args: list[str], says: str, capfd: pytest.CaptureFixture[str]
) -> None:
    from harness import cli as harness_cli

    with pytest.raises(SystemExit) as done:
        harness_cli.main(["receipts", *args])
    assert done.value.code == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
