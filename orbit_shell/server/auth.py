"""Bearer credentials: token format, hashing, lookup and the request principal.

A token is ``orb_<public id>_<secret>``: the public id (16 hex) finds the credential row, the
whole token's SHA-256 is compared in constant time with the stored hash. The secret carries 256
bits from :mod:`secrets`; only the hash is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from orbit_shell import errors
from orbit_shell.engine.db import Database

PREFIX = "orb_"
TOKEN_RE = re.compile(r"^orb_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
SCOPES = (
    "queues:manage",
    "tasks:submit",
    "tasks:read",
    "tasks:manage",  # cancel and resolve
    "workers:connect",
    "workers:consume",
)
# A hash that can never match, compared when the credential id is unknown so that an unknown id
# and a wrong secret take the same path.
_NEVER = "0" * 64


def new_token() -> tuple[str, str, str]:
    """Return ``(token, public id, sha256 hex)`` for a new credential."""
    public_id = secrets.token_hex(8)
    token = f"{PREFIX}{public_id}_{secrets.token_urlsafe(32)}"
    return token, public_id, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: one credential confined to one namespace."""

    credential_id: int
    application_id: int
    environment_id: int
    namespace_id: int
    scopes: frozenset[str]
    all_queues: bool
    queue_ids: frozenset[int]
    public_id: str = ""  # the token's credential id (orb_<public id>_...)

    @property
    def actor(self) -> str:
        return f"credential:{self.credential_id}"

    def require(self, scope: str) -> None:
        """Raise PERMISSION_DENIED unless the credential holds ``scope``."""
        if scope not in self.scopes:
            raise errors.PermissionDenied(f"credential lacks scope {scope}")

    def may_use_queue(self, queue_id: int) -> bool:
        return self.all_queues or queue_id in self.queue_ids


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header, None without one. The scheme's name
    is case-insensitive (RFC 9110 11.1): a client writing "bearer" was refused."""
    if not header or header[:7].lower() != "bearer ":
        return None
    return header[7:].strip()


def bearer(header: str | None) -> tuple[str, str]:
    """``(credential public id, SHA-256 of the token)`` of an ``Authorization: Bearer``
    header, read without the database (a routine that authenticates itself takes these).

    Raises:
        Unauthenticated: missing or malformed.
    """
    token = bearer_token(header)
    if token is None:
        raise errors.Unauthenticated()
    match = TOKEN_RE.match(token)
    if not match:
        raise errors.Unauthenticated()
    return match.group(1), hash_token(token)


def authenticate(database: Database, header: str | None) -> Principal:
    """Resolve an ``Authorization: Bearer`` header to a Principal.

    Raises:
        Unauthenticated: missing, malformed, unknown, revoked or wrong token.
    """
    public_id, digest = bearer(header)
    return authenticate_with(
        database, public_id, lambda stored: hmac.compare_digest(stored, digest)
    )


def authenticate_with(database: Database, public_id: str, proves) -> Principal:
    """The Principal of credential ``public_id`` when ``proves(stored secret hash)`` holds and
    the credential is not revoked: a bearer token's hash, or a dashboard session's signature.

    Raises:
        Unauthenticated: unknown, revoked, or not proven.
    """
    rows = database.query(
        "SELECT id, application_id, environment_id, namespace_id, secret_sha256, scopes, "
        "all_queues, revoked_at FROM credentials WHERE public_id = %s",
        (public_id,),
    )
    stored = rows[0]["secret_sha256"] if rows else _NEVER
    if not proves(stored) or not rows or rows[0]["revoked_at"]:
        raise errors.Unauthenticated()
    row = rows[0]
    queue_ids: frozenset[int] = frozenset()
    if not row["all_queues"]:
        queue_ids = frozenset(
            r["queue_id"]
            for r in database.query(
                "SELECT queue_id FROM credential_queues WHERE credential_id = %s", (row["id"],)
            )
        )
    return Principal(
        credential_id=row["id"],
        application_id=row["application_id"],
        environment_id=row["environment_id"],
        namespace_id=row["namespace_id"],
        scopes=frozenset(s for s in row["scopes"].split(",") if s),
        all_queues=bool(row["all_queues"]),
        queue_ids=queue_ids,
        public_id=public_id,
    )
