"""Dashboard sign-in: a signed, expiring session per sign-in, a CSRF token per session, and the
origin every form must come from.

The cookie names the credential and the sign-in (``public id.issued.nonce.mac``); the MAC is
keyed by the credential's stored hash under the server's ``ORBIT_SESSION_SECRET``, so the
cookie never holds the API token, a session ends when it is ``ORBIT_SESSION_SECONDS`` old, and
revoking the credential (or giving it a new secret) ends every session of it at its next page.
Without ``ORBIT_SESSION_SECRET`` whoever can read the credentials table could sign a session:
set it in production (docs/operations.md). A form's CSRF token is derived from the session's
MAC: another site can neither read it nor make it, and each sign-in has its own.

A POST is refused when its Origin is not the server's public origin: ``ORBIT_PUBLIC_URL`` when
set (behind a proxy that rewrites ``Host``, as nginx does by default), else the forwarded
scheme and host when the operator trusts the proxy (``ORBIT_TRUST_FORWARDED``), else the
request's own scheme, host and port.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import falcon

from orbit_shell import errors
from orbit_shell.engine.db import Database
from orbit_shell.server import auth

COOKIE = "orbit_session"
PATH = "/ui"
_VALUE = re.compile(r"^([0-9a-f]{16})\.([0-9]{1,12})\.([0-9a-f]{32})\.([0-9a-f]{64})$")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Sessions:
    """How this server signs sessions and which origin its forms must come from."""

    secret: bytes = b""
    lifetime: int = 12 * 3600
    public_url: str | None = None
    trust_forwarded: bool = False

    # Sessions ----------------------------------------------------------------------------------
    def _mac(self, secret_sha256: str, body: str) -> str:
        key = hmac.new(self.secret, secret_sha256.encode(), hashlib.sha256).digest()
        return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()

    def sign_in(self, req: falcon.Request, resp: falcon.Response, token: str) -> None:
        """Set a new session's cookie for ``token`` (already authenticated)."""
        public_id = auth.TOKEN_RE.match(token).group(1)
        body = f"{public_id}.{int(time.time())}.{secrets.token_hex(16)}"
        resp.set_cookie(
            COOKIE,
            f"{body}.{self._mac(auth.hash_token(token), body)}",
            path=PATH,
            max_age=self.lifetime,
            http_only=True,
            same_site="Strict",
            secure=self.scheme(req) == "https",
        )

    def principal(self, database: Database, req: falcon.Request) -> auth.Principal:
        """The signed-in credential.

        Raises:
            Unauthenticated: no session, a malformed, forged or expired one, or one of a
                credential revoked (or unknown) since.
        """
        match = _VALUE.match((req.get_cookie_values(COOKIE) or [""])[0])
        if not match:
            raise errors.Unauthenticated()
        public_id, issued, _nonce, mac = match.groups()
        age = time.time() - int(issued)
        if not -60 <= age <= self.lifetime:
            raise errors.Unauthenticated("the session has expired; sign in again")
        body = match.group(0).rsplit(".", 1)[0]
        return auth.authenticate_with(
            database,
            public_id,
            lambda stored: hmac.compare_digest(mac, self._mac(stored, body)),
        )

    @staticmethod
    def csrf_token(req: falcon.Request) -> str:
        """This session's forms' token: derived from its MAC, which only the cookie holds."""
        mac = (req.get_cookie_values(COOKIE) or [""])[0].rsplit(".", 1)[-1]
        return hmac.new(mac.encode(), b"orbit-dashboard-csrf", hashlib.sha256).hexdigest()

    @staticmethod
    def sign_out(resp: falcon.Response) -> None:
        resp.unset_cookie(COOKIE, path=PATH, same_site="Strict")

    # Origins -----------------------------------------------------------------------------------
    def scheme(self, req: falcon.Request) -> str:
        if self.public_url:
            return urlsplit(self.public_url).scheme
        return req.forwarded_scheme if self.trust_forwarded else req.scheme

    def origin(self, req: falcon.Request) -> str:
        """The origin this server's pages are served from, as a browser writes it."""
        if self.public_url:
            return _origin(self.public_url)
        if self.trust_forwarded:
            return _origin(f"{req.forwarded_scheme}://{req.forwarded_host}")
        return _origin(f"{req.scheme}://{req.host}:{req.port}")

    def check_origin(self, req: falcon.Request) -> None:
        """Refuse a POST whose Origin is not this server's. The sign-in form has no CSRF token
        to check (nobody is signed in yet): without this, another site's page could sign a
        visitor in as its own credential, and the visitor would then act in that tenant."""
        sent = req.get_header("Origin")
        if sent and _origin(sent) != self.origin(req):
            raise errors.PermissionDenied("the form was posted from another origin")

    def check_post(self, req: falcon.Request, form: dict[str, str]) -> None:
        """Refuse a state-changing POST from another origin or without this session's CSRF
        token."""
        self.check_origin(req)
        sent = form.get("csrf", "")
        if not sent or not hmac.compare_digest(sent, self.csrf_token(req)):
            raise errors.PermissionDenied(
                "the form's CSRF token is missing or wrong; reload the page"
            )


def _origin(url: str) -> str:
    """``scheme://host[:port]``, lower case, the scheme's default port left out; "" for a
    value that is no origin (such as "null")."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ""
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return ""
    shown = "" if port in (None, _DEFAULT_PORTS[parts.scheme]) else f":{port}"
    return f"{parts.scheme}://{parts.hostname.lower()}{shown}"
