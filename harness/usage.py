"""Usage mistakes of `harness`: one line on stderr, exit status 2.

`run(app, prog)` is `runtime.app.usage.run` (shared with `vessel`): no
arguments, an unknown command or option, a missing required option or a
value that does not parse is `error: <what> (see 'harness <command>
--help')` and exit 2, the status the README reserves for usage and
environment errors (1 means a violation), never a traceback.

Output paths: `prepare_file` / `prepare_dir` create the folders a report
will be written to before any simulation starts, or refuse the path (exit
2, one line) when it cannot be created, so that results are never computed
and then lost to a missing `out/`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import typer

from runtime.app import usage as cli_usage

EXIT_USAGE = 2


class OutputPathError(Exception):
    """An output path that cannot be written: one line, exit 2."""


def fail(message: str) -> NoReturn:
    """Report a usage mistake found by a command itself and exit 2."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    raise typer.Exit(EXIT_USAGE)


def run(app: typer.Typer, prog: str, args: Sequence[str] | None = None) -> int:
    """Run `app` (`runtime.app.usage.run`): usage mistakes are one line, exit 2."""
    return cli_usage.run(app, prog, args, prefix="error: ")


def _check_writable_dir(folder: Path, flag: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputPathError(f"{flag}: {folder} exists and is not a folder") from None
    except OSError as exc:
        raise OutputPathError(
            f"{flag}: cannot create folder {folder}: {exc.strerror or exc}") from None
    if not folder.is_dir():
        raise OutputPathError(f"{flag}: {folder} exists and is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputPathError(f"{flag}: folder {folder} is not writable")


def prepare_file(path: Path | None, flag: str) -> None:
    """Make sure `path` can be written as a file later: its parent folders exist."""
    if path is None:
        return
    if path.is_dir():
        raise OutputPathError(f"{flag}: {path} is a folder, expected a file path")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputPathError(f"{flag}: {path} is not writable")
    _check_writable_dir(path.parent if str(path.parent) else Path("."), flag)


def prepare_dir(path: Path | None, flag: str) -> None:
    """Make sure `path` exists as a writable folder."""
    if path is not None:
        _check_writable_dir(path, flag)


def prepare_outputs(files: dict[str, Path | None], dirs: dict[str, Path | None] | None = None,
                    ) -> None:
    """Prepare every output path of a command, or exit 2 naming the first bad one."""
    try:
        for flag, path in files.items():
            prepare_file(path, flag)
        for flag, path in (dirs or {}).items():
            prepare_dir(path, flag)
    except OutputPathError as exc:
        fail(str(exc))
