"""Bearer-token credentials of the HTTP surface.

The principal of every request comes from its credential, never from the
request body: it becomes the admitted Intent's sigil (the idempotency scope
and the owner of the Run's consents, seed 000_81a5c720b14d934a.txt,
"Admission and exact claim" and "Events, settlement, and waits").

Guarantees:
- Tokens come from the environment: `VESSEL_TOKENS="alice:tok1,bob:tok2"`
  (principal:token pairs) and/or `VESSEL_TOKEN=tok` for principal
  "operator". Malformed entries, empty names or tokens, a principal named
  twice and one token shared by two principals are refused with
  `CredentialsInvalid` (one line), never half-applied.
- Without any token, `Credentials` refuses to exist unless `insecure_local`
  is set; then every request acts as principal "local".
- `VESSEL_ADMINS="alice,ops"` names principals holding the admin scope:
  they may read, stream and cancel every principal's Runs. Everyone else
  sees only the Runs they admitted (`may_access`); an admin name that is
  not a known principal is refused.
- `principal_for` compares the presented token against every known token in
  constant time per token, so response timing does not reveal a prefix.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

TOKENS_ENV = "VESSEL_TOKENS"
TOKEN_ENV = "VESSEL_TOKEN"
ADMINS_ENV = "VESSEL_ADMINS"
OPERATOR = "operator"
LOCAL = "local"


class CredentialsInvalid(ValueError):
    """The configured credentials are malformed or missing."""


def tokens_from_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """principal -> token from VESSEL_TOKENS and VESSEL_TOKEN; may be empty."""
    env = os.environ if environ is None else environ
    tokens: dict[str, str] = {}
    for entry in (part.strip() for part in env.get(TOKENS_ENV, "").split(",")):
        if not entry:
            continue
        principal, sep, token = (piece.strip() for piece in entry.partition(":"))
        if not sep or not principal or not token:
            raise CredentialsInvalid(
                f"{TOKENS_ENV}: entry {_masked(entry)!r} is not principal:token"
            )
        _add(tokens, principal, token, TOKENS_ENV)
    single = env.get(TOKEN_ENV, "").strip()
    if single:
        _add(tokens, OPERATOR, single, TOKEN_ENV)
    return tokens


def admins_from_env(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The principals VESSEL_ADMINS grants the admin scope; may be empty."""
    env = os.environ if environ is None else environ
    return frozenset(name.strip() for name in env.get(ADMINS_ENV, "").split(",") if name.strip())


def _add(tokens: dict[str, str], principal: str, token: str, source: str) -> None:
    if principal in tokens:
        raise CredentialsInvalid(f"{source}: principal {principal!r} is given more than once")
    if any(hmac.compare_digest(token.encode(), other.encode()) for other in tokens.values()):
        raise CredentialsInvalid(f"{source}: principal {principal!r} reuses another's token")
    tokens[principal] = token


def _masked(entry: str) -> str:
    principal, sep, _ = entry.partition(":")
    return f"{principal}:***" if sep else principal


@dataclass(frozen=True)
class Credentials:
    tokens: Mapping[str, str] = field(default_factory=dict)
    insecure_local: bool = False
    admins: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.tokens and not self.insecure_local:
            raise CredentialsInvalid(
                f"no credentials: set {TOKENS_ENV}=principal:token,... or {TOKEN_ENV}=token "
                "(or pass --insecure-local for a loopback-only development server)"
            )
        for principal, token in self.tokens.items():
            if not principal or not token:
                raise CredentialsInvalid("principals and tokens must not be empty")
        unknown = sorted(self.admins - set(self.tokens))
        if unknown and self.enforced:
            raise CredentialsInvalid(
                f"{ADMINS_ENV}: {', '.join(map(repr, unknown))} is not a principal with a token"
            )

    @property
    def enforced(self) -> bool:
        return bool(self.tokens)

    def principal_for(self, token: str | None) -> str | None:
        """The principal owning `token`, "local" when not enforced, else None."""
        if not self.enforced:
            return LOCAL
        if not token:
            return None
        found: str | None = None
        for principal, known in self.tokens.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                found = principal
        return found


    def may_access(self, principal: str, owner: str) -> bool:
        """Whether `principal` may read, stream or cancel a Run `owner` admitted."""
        return principal == owner or principal in self.admins or not self.enforced


def credentials(
    value: Credentials | Mapping[str, str] | str | None, *, insecure_local: bool = False
) -> Credentials:
    """Normalise what `create_app` accepts: Credentials, principal->token, one
    operator token, or None (only with `insecure_local`)."""
    if isinstance(value, Credentials):
        return value
    if isinstance(value, str):
        return Credentials({OPERATOR: value}, insecure_local)
    return Credentials(dict(value or {}), insecure_local)
