"""Command-line usage mistakes: one line on stderr, exit status 2.

`run(app, prog)` invokes a typer app with click's standalone mode off, so
every parsing mistake reaches us as an exception instead of typer's
rich-formatted box or a traceback: no arguments at all, an unknown command
or option, a missing required option, a value that does not parse. Each
becomes `<prefix><what> (see '<prog> <command> --help')` and exit 2, the
status both CLIs reserve for usage and environment errors. typer >= 0.20
ships its own copy of click (`typer._click`), so the classes are matched by
name along the MRO (UsageError, NoSuchOption, MissingParameter,
BadParameter, ...), whichever click raised them.

Used by `vessel` (`runtime.app.cli.main`) and `harness` (`harness.cli.main`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer

EXIT_USAGE = 2


def _is(exc: BaseException, name: str) -> bool:
    return any(cls.__name__ == name for cls in type(exc).__mro__)


def _command_path(exc: BaseException, prog: str) -> str:
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) if ctx is not None else None
    return str(path) if path else prog


def _commands(exc: BaseException) -> list[str]:
    ctx = getattr(exc, "ctx", None)
    command = getattr(ctx, "command", None)
    found = getattr(command, "commands", None) or {}
    return sorted(name for name, cmd in found.items() if not getattr(cmd, "hidden", False))


def one_line(exc: BaseException, prog: str, prefix: str) -> str:
    """The single line a usage exception is reported as."""
    where = _command_path(exc, prog)
    text = getattr(exc, "format_message", exc.__str__)()
    message = " ".join(str(text).split())
    names = _commands(exc)
    if message.startswith("Missing command") and names:
        message = f"missing command: one of {', '.join(names)}"
    return f"{prefix}{message} (see '{where} --help')"


def command_tree(app: typer.Typer) -> Any:
    """The click command behind `app`, with every group's help-on-no-arguments off.

    typer's `no_args_is_help` renders the help while it builds its exception
    and the caller then shows it again (the help twice on screen); off, a
    bare group is click's one-line "Missing command" usage error instead.
    """
    root = typer.main.get_command(app)
    todo = [root]
    while todo:
        group = todo.pop()
        if hasattr(group, "no_args_is_help"):
            group.no_args_is_help = False
        todo.extend(getattr(group, "commands", {}).values())
    return root


def run(app: typer.Typer, prog: str, args: Sequence[str] | None = None,
        prefix: str = "error: ") -> int:
    """Run `app`; return its exit status. Usage mistakes: one line, status 2."""
    argv = list(sys.argv[1:] if args is None else args)
    try:
        rv: Any = command_tree(app).main(args=argv, prog_name=prog, standalone_mode=False)
    except Exception as exc:
        if _is(exc, "UsageError"):
            print(one_line(exc, prog, prefix), file=sys.stderr, flush=True)
            return EXIT_USAGE
        if _is(exc, "Abort"):
            print(f"{prefix}aborted", file=sys.stderr, flush=True)
            return EXIT_USAGE
        raise
    except KeyboardInterrupt:
        return 130
    return rv if isinstance(rv, int) else 0
