"""Every `harness` and `vessel` command answers a usage mistake with one line
on stderr and exit status 2, never a traceback (README: 2 is a usage or
environment error, 1 a violation). The commands are enumerated from the typer
apps themselves, so a command added later is covered without editing this."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import typer

from harness import cli as harness_cli
from runtime.app import cli as vessel_cli
from runtime.app.usage import command_tree

MAINS: dict[str, tuple[typer.Typer, Callable[[list[str]], None]]] = {
    "harness": (harness_cli.app, harness_cli.main),
    "vessel": (vessel_cli.cli, vessel_cli.main),
}


def _walk(prog: str, command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield (prog, *path)
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _walk(prog, sub, (*path, name))


def _all(kind: str) -> list[tuple[str, ...]]:
    """Every command path (`kind='leaf'`) or group path (`kind='group'`) of both CLIs."""
    found = []
    for prog, (app, _) in MAINS.items():
        root = command_tree(app)
        for path in _walk(prog, root):
            cmd = root
            for name in path[1:]:
                cmd = cmd.commands[name]
            if (kind == "group") == hasattr(cmd, "commands"):
                found.append(path)
    return found


def _numeric_options() -> list[tuple[tuple[str, ...], str]]:
    found = []
    for prog, (app, _) in MAINS.items():
        root = command_tree(app)
        for path in _all("leaf"):
            if path[0] != prog:
                continue
            cmd = root
            for name in path[1:]:
                cmd = cmd.commands[name]
            for param in cmd.params:
                annotation = getattr(param, "type_descriptor", None)
                text = f"{getattr(param, 'type', '')} {annotation}".lower()
                opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
                if opts and ("int" in text or "float" in text) and "bool" not in text:
                    found.append((path, opts[0]))
    return found


LEAVES = _all("leaf")
GROUPS = _all("group")


def _run(path: tuple[str, ...], *extra: str, capsys: pytest.CaptureFixture[str]) -> str:
    _, main = MAINS[path[0]]
    with pytest.raises(SystemExit) as info:
        main([*path[1:], *extra])
    captured = capsys.readouterr()
    assert info.value.code == 2, (path, extra, captured.out, captured.err)
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, (path, extra, captured.err)
    assert "Traceback" not in captured.err
    assert captured.out == "", (path, extra, captured.out)
    return lines[0]


def test_both_clis_have_their_commands() -> None:
    names = {" ".join(p) for p in LEAVES}
    assert {"harness campaign", "harness replay", "harness shrink", "harness gate",
            "vessel serve", "vessel jobs work"} <= names


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_an_unknown_flag_is_one_line_and_exit_2(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    line = _run(path, "--no-such-flag-m15", capsys=capsys)
    assert "--no-such-flag-m15" in line and f"{' '.join(path)} --help" in line


@pytest.mark.parametrize("path", GROUPS, ids=" ".join)
def test_a_bare_group_names_its_commands_once(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    line = _run(path, capsys=capsys)
    assert "missing command" in line


@pytest.mark.parametrize("path", GROUPS, ids=" ".join)
def test_an_unknown_command_is_one_line_and_exit_2(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "no-such-command" in _run(path, "no-such-command", capsys=capsys)


@pytest.mark.parametrize(("path", "option"), _numeric_options(),
                         ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_a_value_that_does_not_parse_is_one_line_and_exit_2(
    path: tuple[str, ...], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert option in _run(path, option, "not-a-number", capsys=capsys)


@pytest.mark.parametrize("args", [["replay"], ["shrink"], ["replay", "--seed"]])
def test_a_missing_required_option_is_one_line_and_exit_2(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "--seed" in _run(("harness", *args), capsys=capsys)


def test_the_numeric_options_are_found() -> None:
    assert (("harness", "campaign"), "--jobs") in _numeric_options()
    assert (("vessel", "serve"), "--port") in _numeric_options()


@pytest.mark.parametrize("prog", ["harness", "vessel"])
def test_the_console_scripts_without_arguments_print_one_line(prog: str) -> None:
    script = os.path.join(os.path.dirname(sys.executable), prog)
    done = subprocess.run([script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and "missing command" in done.stderr


@pytest.mark.parametrize("command", ["replay", "shrink"])
@pytest.mark.parametrize("spec", ["all", "basic,cancel", "basic, cancel"])
def test_replay_and_shrink_take_exactly_one_scenario(
    command: str, spec: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sim.kernel
    import sim.shrink

    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("a simulation ran for a refused --scenario")

    monkeypatch.setattr(sim.kernel, "run_simulation", no_work)
    monkeypatch.setattr(sim.shrink, "shrink", no_work)
    line = _run(("harness", command), "--seed", "1", "--scenario", spec, capsys=capsys)
    assert "one scenario" in line and "basic" in line and "cancel" in line
