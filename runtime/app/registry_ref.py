"""`vessel serve --app module:attribute`: serve a user's own Patterns.

The runtime never imports the harness, so the object `--app` names is taken
by shape, not by type. It may be:
- a `WorkflowRegistry`;
- an object whose `serve_registry()` returns one (a `harness.api.App` does:
  it builds the app's systems once for the process, with no faults);
- an object whose `registry` attribute is one;
- a function of no arguments returning any of these.

Whatever else it is, `load_registry` raises `RegistryRefError` with one line
saying why, which `vessel serve` reports with exit status 2 before anything
is bound or written.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from runtime.registry import WorkflowRegistry


class RegistryRefError(Exception):
    """The `--app` reference names no registry; the message is one line."""


def resolve_ref(ref: str) -> Any:
    """The object `ref` (`package.module:attribute`, dots allowed in the attribute)
    names, importing the module with the current directory importable, as for
    `python -m`. Raises `RegistryRefError` with one line saying what is wrong; the
    harness's `--app` loader uses it too."""
    module_name, colon, attr = ref.partition(":")
    if not colon or not module_name or not attr:
        raise RegistryRefError(f"--app {ref!r}: use module:attribute, e.g. mypkg.sim:app")
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryRefError(f"--app {ref!r}: cannot import {module_name}: {exc}") from None
    except Exception as exc:
        raise RegistryRefError(f"--app {ref!r}: importing {module_name} raised "
                               f"{type(exc).__name__}: {_one_line(exc)}") from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise RegistryRefError(f"--app {ref!r}: {module_name} has no attribute {attr}")
        target = getattr(target, part)
    return target


def load_registry(ref: str) -> WorkflowRegistry:
    """The WorkflowRegistry `ref` (`package.module:attribute`) names."""
    target = resolve_ref(ref)
    try:
        return _registry_of(target, ref)
    except RegistryRefError:
        raise
    except Exception as exc:
        raise RegistryRefError(f"--app {ref!r}: building its registry raised "
                               f"{type(exc).__name__}: {_one_line(exc)}") from None


def _registry_of(target: Any, ref: str, called: bool = False) -> WorkflowRegistry:
    if isinstance(target, WorkflowRegistry):
        return target
    serve = getattr(target, "serve_registry", None)
    if callable(serve):
        built = serve()
        if isinstance(built, WorkflowRegistry):
            return built
        raise RegistryRefError(f"--app {ref!r}: serve_registry() returned a "
                               f"{type(built).__name__}, not a WorkflowRegistry")
    inner = getattr(target, "registry", None)
    if isinstance(inner, WorkflowRegistry):
        return inner
    if callable(target) and not called and not isinstance(target, type):
        return _registry_of(target(), ref, called=True)
    raise RegistryRefError(
        f"--app {ref!r}: a {type(target).__name__} is not a WorkflowRegistry, nor has "
        "serve_registry() or a registry attribute holding one")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
