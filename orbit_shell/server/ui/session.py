"""Dashboard sign-in: the Orbit credential token in an HttpOnly, SameSite=Strict cookie, and a
CSRF token on every form.

The cookie holds the token itself, so every page authenticates as the API does (a revoked
credential is refused on its next page). The CSRF token is an HMAC of a fixed text under the
credential token: a page can carry it, another site can neither read it nor make it. A POST
whose Origin names another host, the sign-in's included, is refused before its token is even
looked at.
"""

from __future__ import annotations

import hashlib
import hmac

import falcon

from orbit_shell import errors
from orbit_shell.engine.db import Database
from orbit_shell.server import auth

COOKIE = "orbit_token"
PATH = "/ui"


def principal(database: Database, req: falcon.Request) -> auth.Principal:
    token = req.get_cookie_values(COOKIE)
    if not token:
        raise errors.Unauthenticated()
    return auth.authenticate(database, "Bearer " + token[0])


def csrf_token(req: falcon.Request) -> str:
    [token] = req.get_cookie_values(COOKIE)[:1] or [""]
    return hmac.new(token.encode(), b"orbit-dashboard-csrf", hashlib.sha256).hexdigest()


def check_origin(req: falcon.Request) -> None:
    """Refuse a POST whose Origin names another host. The sign-in form has no CSRF token to
    check (nobody is signed in yet): without this, another site's page could sign a visitor
    in as its own credential, and the visitor would then act in that tenant unawares."""
    origin = req.get_header("Origin")
    if origin and origin.split("://", 1)[-1] != req.host + (
        f":{req.port}" if req.port not in (80, 443) else ""
    ):
        raise errors.PermissionDenied("the form was posted from another origin")


def check_post(req: falcon.Request, form: dict[str, str]) -> None:
    """Refuse a state-changing POST from another origin or without this sign-in's CSRF token."""
    check_origin(req)
    sent = form.get("csrf", "")
    if not sent or not hmac.compare_digest(sent, csrf_token(req)):
        raise errors.PermissionDenied("the form's CSRF token is missing or wrong; reload the page")


def sign_in(req: falcon.Request, resp: falcon.Response, token: str) -> None:
    resp.set_cookie(
        COOKIE,
        token,
        path=PATH,
        http_only=True,
        same_site="Strict",
        secure=req.forwarded_scheme == "https",
    )


def sign_out(resp: falcon.Response) -> None:
    resp.unset_cookie(COOKIE, path=PATH, same_site="Strict")
