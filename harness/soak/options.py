"""Every knob of a soak in one struct, validated before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

TOXIC_KINDS = ("latency", "bandwidth", "slow_close", "timeout", "slicer", "limit_data")


class SoakUsageError(ValueError):
    """A bad option: the message names it and says why (the CLI exits 2)."""


@dataclass(frozen=True)
class Toxic:
    """One Toxiproxy toxic between the Vessels and PostgreSQL, e.g. `latency:latency=20`."""

    kind: str
    attributes: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> Toxic:
        kind, _, rest = spec.partition(":")
        if kind not in TOXIC_KINDS:
            raise SoakUsageError(f"--toxics {spec!r}: unknown toxic {kind!r}; expected one of "
                                 f"{', '.join(TOXIC_KINDS)}")
        attributes: dict[str, int] = {}
        for pair in filter(None, rest.split(",")):
            name, eq, value = pair.partition("=")
            if not eq or not value.strip().isdigit():
                raise SoakUsageError(f"--toxics {spec!r}: {pair!r} is not name=<integer>")
            attributes[name.strip()] = int(value)
        return cls(kind, attributes)


@dataclass(frozen=True)
class SoakOptions:
    runs: int = 200
    kill_every_s: float = 0.0
    """SIGKILL one Vessel (chosen by the seed) this often; 0 kills none."""
    pg_restarts: int = 0
    """PostgreSQL restarts, spread evenly over the admissions (needs an owned cluster)."""
    vessels: int = 1
    toxics: tuple[Toxic, ...] = ()
    concurrency: int = 8
    seed: int = 1
    settle_within_s: float = 180.0
    """After the last fault: how long every admitted Run has to reach a terminal state."""
    recover_within_s: float = 90.0
    """After each fault: how long a probe Run has to complete before it counts as unrecovered."""
    out_dir: Path = Path("out/soak")
    dsn: str | None = None
    """A server to create the soak's database on; with pg_restarts an owned cluster is used."""

    def __post_init__(self) -> None:
        checks = [
            (self.runs >= 1, "--runs must be at least 1"),
            (self.kill_every_s >= 0, "--kill-every must be >= 0 seconds"),
            (self.pg_restarts >= 0, "--pg-restarts must be >= 0"),
            (1 <= self.vessels <= 8, "--vessels must be between 1 and 8"),
            (1 <= self.concurrency <= 64, "--concurrency must be between 1 and 64"),
            (self.settle_within_s > 0, "--settle-within must be > 0 seconds"),
            (self.recover_within_s > 0, "--recover-within must be > 0 seconds"),
        ]
        for ok, message in checks:
            if not ok:
                raise SoakUsageError(message)
        if self.pg_restarts and self.dsn:
            raise SoakUsageError("--pg-restarts restarts PostgreSQL itself: it needs a cluster "
                                 "the soak owns, so it cannot be combined with --dsn")
