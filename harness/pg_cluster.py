"""An ephemeral local PostgreSQL cluster from `initdb` and `pg_ctl` (DESIGN section 7).

`ephemeral_cluster()` creates a throwaway data directory, starts a server on a
free loopback port with trust authentication, yields a DSN for its `postgres`
database, and on exit stops the server and deletes the directory. The server
binaries refuse to run as root, so under root every command runs as the
`postgres` account through `runuser` and the directory is owned by it.
Anything missing or failing raises `ClusterUnavailable` with the reason;
nothing is left running. `restartable_cluster()` yields the handle instead
of the DSN, for tests that stop, crash or restart PostgreSQL itself.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SERVICE_ACCOUNT = "postgres"
BINDIR_ENV = "HARNESS_PG_BINDIR"
START_ATTEMPTS = 3
COMMAND_TIMEOUT_S = 120


class ClusterUnavailable(Exception):
    """No ephemeral cluster could be started here; the message says why."""


@dataclass(frozen=True)
class Binaries:
    initdb: Path
    pg_ctl: Path


def find_binaries() -> Binaries:
    """`initdb` and `pg_ctl` from $HARNESS_PG_BINDIR, PATH, pg_config, or /usr/lib/postgresql."""
    candidates: list[Path] = []
    if os.environ.get(BINDIR_ENV):
        candidates.append(Path(os.environ[BINDIR_ENV]))
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(versions)
    for folder in candidates:
        initdb, pg_ctl = folder / "initdb", folder / "pg_ctl"
        if initdb.is_file() and pg_ctl.is_file():
            return Binaries(initdb, pg_ctl)
    raise ClusterUnavailable(
        f"no initdb/pg_ctl found (set {BINDIR_ENV}, put them on PATH, or install PostgreSQL)"
    )


def _service_user() -> pwd.struct_passwd | None:
    """The account to run the server as: None when not root (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        account = pwd.getpwnam(SERVICE_ACCOUNT)
    except KeyError:
        raise ClusterUnavailable(
            f"running as root and there is no {SERVICE_ACCOUNT!r} account to run initdb/pg_ctl"
        ) from None
    if shutil.which("runuser") is None:
        raise ClusterUnavailable("running as root and `runuser` is not available")
    return account


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Runner:
    def __init__(self, account: pwd.struct_passwd | None, cwd: Path) -> None:
        self.account = account
        self.cwd = cwd

    def __call__(self, *argv: str | Path, timeout: float = COMMAND_TIMEOUT_S) -> None:
        prefix = ["runuser", "-u", self.account.pw_name, "--"] if self.account else []
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C.UTF-8", LANG="C.UTF-8")
        try:
            subprocess.run(
                [*prefix, *map(str, argv)],
                cwd=self.cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=True,
            )
        except subprocess.CalledProcessError as exc:
            detail = (exc.stderr or exc.stdout or "").strip().splitlines()[-3:]
            raise ClusterUnavailable(
                f"{Path(str(argv[0])).name} {argv[1] if len(argv) > 1 else ''} failed "
                f"(exit {exc.returncode}): {' | '.join(detail)}"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ClusterUnavailable(f"{argv[0]} did not finish within {timeout:g} s") from exc
        except OSError as exc:
            raise ClusterUnavailable(f"cannot run {argv[0]}: {exc}") from exc


@contextlib.contextmanager
def ephemeral_cluster(start_timeout_s: int = 60) -> Iterator[str]:
    """Start a throwaway cluster; yield `postgresql://postgres@127.0.0.1:<port>/postgres`."""
    with restartable_cluster(start_timeout_s) as cluster:
        yield cluster.dsn


@dataclass
class EphemeralCluster:
    """A running throwaway cluster that its owner may stop, start and restart."""

    dsn: str
    port: int
    root: Path
    data: Path
    binaries: Binaries
    run: _Runner

    def stop(self, mode: str = "fast") -> None:
        """`pg_ctl stop -m fast|immediate|smart`; immediate is a crash (WAL recovery next)."""
        self.run(self.binaries.pg_ctl, "stop", "-D", self.data, "-m", mode, "-w", "-t", "30",
                 timeout=40)

    def start(self, timeout_s: int = 60) -> None:
        """Start it again on the same port."""
        self.run(
            self.binaries.pg_ctl, "start", "-D", self.data, "-w", "-t", str(timeout_s),
            "-l", self.root / "server.log", "-o", _options(self.port, self.root),
            timeout=timeout_s + 10,
        )  # fmt: skip

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()


@contextlib.contextmanager
def restartable_cluster(start_timeout_s: int = 60) -> Iterator[EphemeralCluster]:
    """Like `ephemeral_cluster`, but yield the handle (DSN, stop, start, restart)."""
    binaries = find_binaries()
    account = _service_user()
    root = Path(tempfile.mkdtemp(prefix="harness-pg-"))
    try:
        if account is not None:
            os.chown(root, account.pw_uid, account.pw_gid)
        run = _Runner(account, root)
        data = root / "data"
        run(
            binaries.initdb,
            "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync",
        )  # fmt: skip
        port = _start(run, binaries, root, data, start_timeout_s)
        try:
            yield EphemeralCluster(
                f"postgresql://postgres@127.0.0.1:{port}/postgres", port, root, data, binaries, run
            )
        finally:
            _stop(run, binaries, data)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _options(port: int, root: Path) -> str:
    return (
        f"-F -p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root} "
        "-c max_connections=200"
    )


def _start(run: _Runner, binaries: Binaries, root: Path, data: Path, timeout_s: int) -> int:
    last: ClusterUnavailable | None = None
    for _ in range(START_ATTEMPTS):  # a free port can be taken before the server binds it
        port = free_port()
        options = _options(port, root)
        try:
            run(
                binaries.pg_ctl, "start", "-D", data, "-w", "-t", str(timeout_s),
                "-l", root / "server.log", "-o", options,
                timeout=timeout_s + 10,
            )  # fmt: skip
            return port
        except ClusterUnavailable as exc:
            last = ClusterUnavailable(f"{exc}; server log: {_log_tail(root / 'server.log')}")
            with contextlib.suppress(ClusterUnavailable):
                run(binaries.pg_ctl, "stop", "-D", data, "-m", "immediate", "-w", timeout=30)
    assert last is not None
    raise last


def _stop(run: _Runner, binaries: Binaries, data: Path) -> None:
    try:
        run(binaries.pg_ctl, "stop", "-D", data, "-m", "fast", "-w", "-t", "30", timeout=40)
    except ClusterUnavailable:
        with contextlib.suppress(ClusterUnavailable):
            run(binaries.pg_ctl, "stop", "-D", data, "-m", "immediate", "-w", timeout=30)


def _log_tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "<no log>"
