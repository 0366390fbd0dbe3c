"""The operator dashboard under ``/ui/``: server-rendered pages over the API's scoped reads.

Every page authenticates with the signed-in session (``Sessions.principal``) and reads
through ``Scope`` (namespace and queue scope, SPEC 1), the key pages through ``KeyPages``;
every change goes through ``actions``, the functions the API calls. A page offers only the
actions the credential's scopes allow, and a POST is refused without the page's CSRF token.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import quote, urlencode

import falcon
from falcon.util.uri import parse_query_string
from markupsafe import Markup

from orbit_shell import errors, validation
from orbit_shell.engine import serialize
from orbit_shell.engine.db import Database
from orbit_shell.server import actions, auth, keypages
from orbit_shell.server.common import read_body
from orbit_shell.server.resources import keys as key_routes
from orbit_shell.server.resources import tasks as task_routes
from orbit_shell.server.schedule_reads import schedule_list, schedule_view
from orbit_shell.server.scoped import Scope
from orbit_shell.server.ui import reads, render, session
from orbit_shell.server.ui.session import Sessions
from orbit_shell.server.ui.signins import SignInGuard

# The pages' filters, checked as the API checks its list routes' query parameters.
TASK_FILTERS = {
    **{n: task_routes.LIST_QUERY[n] for n in ("state", "queue_id", "concurrency_key")},
    "handler": validation.Text(1, 200),
}
KEY_QUERY = key_routes.LIST_QUERY
PAGE = 50
TASK_ROWS = 20  # a task page's last attempts and history events
# Tasks a page filtered by handler reads at most (no index serves that filter): a namespace
# of 100,000 tasks was read whole for every such page.
HANDLER_EXAMINED = 5_000
MAX_FORM_BYTES = 16_384


class Dashboard:
    """All ``/ui`` routes; Falcon suffixes name the pages."""

    auth_exempt = True  # the cookie, not an Authorization header, signs a page in

    def __init__(self, database: Database, sessions: Sessions, sign_ins: SignInGuard) -> None:
        self.db = database
        self.sessions = sessions
        self.sign_ins = sign_ins
        self.env = render.environment()

    # Rendering ------------------------------------------------------------------------------
    def _render(self, req, resp, name: str, status=falcon.HTTP_200, **context: Any) -> None:
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)

        def when(at: dt.datetime | str | None) -> Markup | str:
            """A time shown both ways: relative, and absolute in UTC (a datetime from a row, or
            the ISO text an API representation holds)."""
            if at is None:
                return "—"
            if isinstance(at, str):
                at = dt.datetime.fromisoformat(at.removesuffix("Z"))
            return Markup('<time datetime="{0}">{1}</time> <small>{2} UTC</small>').format(
                serialize.iso(at), render.ago(at, now), at.strftime("%Y-%m-%d %H:%M:%S")
            )

        resp.status = status
        resp.content_type = falcon.MEDIA_HTML
        resp.set_header("Cache-Control", "no-store")
        resp.set_header("X-Frame-Options", "DENY")
        resp.set_header(
            "Content-Security-Policy",
            "default-src 'self'; style-src 'unsafe-inline'; script-src 'none'; "
            "frame-ancestors 'none'; form-action 'self'",
        )
        # ``here``: this page's own address, percent-encoded (a form's ``back``); ``path``,
        # decoded, only marks the navigation's current entry.
        here = context.pop("here", None) or quote(req.path, safe="/")
        resp.text = self.env.get_template(name).render(
            when=when, path=req.path, here=here, query=req.query_string, **context
        )

    def _page(self, req, resp, name: str, build) -> None:
        """Sign the page in, build its context with the scope, render; sign-in problems go to
        the sign-in page, refusals and unknown objects to an error page."""
        try:
            s = Scope(self.db, self.sessions.principal(self.db, req))
            s.principal.require("tasks:read")  # every page reads tasks
            context = build(s)
        except errors.Unauthenticated:
            raise falcon.HTTPSeeOther("/ui/login") from None
        except errors.OrbitError as exc:
            self._error(req, resp, exc)
            return
        self._render(
            req,
            resp,
            name,
            scopes=s.principal.scopes,
            csrf=self.sessions.csrf_token(req),
            **context,
        )

    def _error(self, req, resp, exc: errors.OrbitError) -> None:
        self.error_page(req, resp, exc.status, exc.code, exc.message)

    def error_page(self, req, resp, status: str, code: str, message: str) -> None:
        """An error as a page with the pages' headers, never the API's JSON: the app's error
        boundary calls this for every error under ``/ui/``, an unexpected one included (500).
        A signed-in visitor is offered sign-out, so a refused credential is never stuck."""
        self._render(
            req,
            resp,
            "error.html",
            status=status,
            error={"code": code, "message": message},
            scopes=frozenset(),
            csrf="",
            signed_in=bool(req.get_cookie_values(session.COOKIE)),
        )

    # Sign-in ---------------------------------------------------------------------------------
    def on_get_login(self, req, resp) -> None:
        self._render(req, resp, "login.html", scopes=frozenset(), csrf="", failed="", wait=0)

    def _posted_elsewhere(self, req, resp) -> bool:
        """True, with the refusal answered, for a POST from another origin (check_origin): the
        sign-in and sign-out, whose forms carry no CSRF token for _act to check."""
        try:
            self.sessions.check_origin(req)
        except errors.PermissionDenied as exc:
            self._error(req, resp, exc)
            return True
        return False

    def on_post_login(self, req, resp) -> None:
        if self._posted_elsewhere(req, resp):
            return
        address = self._client(req)
        wait = self.sign_ins.wait(address)
        if wait:
            resp.set_header("Retry-After", str(wait))
            self._login_refused(req, resp, falcon.HTTP_429, "too-many", wait=wait)
            return
        form = self._form(req)
        token = form.get("token", "").strip()
        try:
            who = auth.authenticate(self.db, "Bearer " + token)
        except errors.Unauthenticated:
            self.sign_ins.failed(address, "unknown token")
            self._login_refused(req, resp, falcon.HTTP_401, "unknown")
            return
        if "tasks:read" not in who.scopes:  # every page reads tasks: it would see only 403s
            self.sign_ins.failed(address, "no tasks:read")
            self._login_refused(req, resp, falcon.HTTP_403, "no-read")
            return
        self.sessions.sign_in(req, resp, token)
        raise falcon.HTTPSeeOther("/ui/")

    def _client(self, req) -> str:
        """The address a sign-in comes from (the proxy's client when the proxy is trusted)."""
        if self.sessions.trust_forwarded and req.access_route:
            return req.access_route[0]
        return req.remote_addr or "unknown"

    def _login_refused(self, req, resp, status: str, why: str, wait: int = 0) -> None:
        self._render(
            req, resp, "login.html", status, scopes=frozenset(), csrf="", failed=why, wait=wait
        )

    def on_post_logout(self, req, resp) -> None:
        if self._posted_elsewhere(req, resp):
            return
        self.sessions.sign_out(resp)
        raise falcon.HTTPSeeOther("/ui/login")

    # Pages -----------------------------------------------------------------------------------
    def on_get_overview(self, req, resp) -> None:
        def build(s: Scope) -> dict:
            queues = reads.queue_figures(s)
            names = ("ready", "parked", "needs_review", "expired_last_hour")
            return {
                "queues": queues,
                "retention": reads.retention(s),
                "live_sessions": reads.live_sessions(s),
                "totals": {
                    **{name: sum(q[name] for q in queues) for name in names},
                    "lower_bounds": {n for q in queues for n in q["lower_bounds"]},
                },
            }

        self._page(req, resp, "overview.html", build)

    def on_get_queues(self, req, resp) -> None:
        def build(s: Scope) -> dict:
            return {"queues": reads.queue_figures(s)}

        self._page(req, resp, "queues.html", build)

    def on_get_tasks(self, req, resp) -> None:
        def build(s: Scope) -> dict:
            chosen = {name: req.get_param(name) or "" for name in TASK_FILTERS}
            # The API's checks for its filters (tasks.LIST_QUERY), and the page's handler.
            filters = {n: TASK_FILTERS[n](n, value) for n, value in chosen.items() if value}
            queues = s.queues()  # the filter's choices: names only, nothing counted
            if "queue_id" in filters:
                filters["queue_id"] = s.queue(filters["queue_id"])["id"]
            after = s.task_position(req.get_param("cursor"))
            resume = None
            if "handler" in filters:  # no index: a bounded stretch of tasks at a time
                rows, resume = s.tasks_examined(filters, after, PAGE + 1, HANDLER_EXAMINED)
            else:
                rows = s.tasks(filters, after, PAGE + 1)
            nxt = {k: v for k, v in chosen.items() if v}
            if len(rows) > PAGE:
                resume = rows[PAGE - 1]["public_id"]
            if resume:
                nxt["cursor"] = resume
            return {
                "tasks": rows[:PAGE],
                "chosen": chosen,
                "states": task_routes.STATES,
                "queues": queues,
                "next_url": "/ui/tasks?" + urlencode(nxt) if resume else None,
                "examined": HANDLER_EXAMINED if resume and len(rows) <= PAGE else None,
            }

        self._page(req, resp, "tasks.html", build)

    def on_get_task(self, req, resp, task_id: str) -> None:
        def build(s: Scope) -> dict:
            row = s.task(task_id)
            why = s.waiting(row)
            return {
                "task": serialize.task_detail(row),
                "row": row,
                "why": why,
                "waiting": serialize.waiting(row, why),
                **self._last_rows(s, row, task_id),
            }

        self._page(req, resp, "task.html", build)

    @staticmethod
    def _last_rows(s: Scope, row: dict, task_id: str) -> dict:
        """A task page's last attempts and events (a history has no bound: resolving back to
        WAITING raises max_attempts), with whether older ones exist."""
        attempts = s.attempts(task_id, 0, TASK_ROWS + 1, newest=True)
        total = s.history_count(row)
        return {
            "attempts": attempts[-TASK_ROWS:],
            "attempts_older": len(attempts) > TASK_ROWS,
            "history": s.history(task_id, max(0, total - TASK_ROWS), TASK_ROWS),
            "history_total": total,
        }

    def _task_rows(self, req, resp, task_id: str, kind: str) -> None:
        def build(s: Scope) -> dict:
            given = req.get_param("cursor") or "0"
            after = task_routes.PAGE_QUERY["cursor"]("cursor", given)
            read = s.attempts if kind == "attempts" else s.history
            rows = read(task_id, after, PAGE + 1)
            last = "attempt_number" if kind == "attempts" else "position"
            base = f"/ui/tasks/{task_id}/{kind}"
            return {
                "kind": kind,
                "title": "Attempts" if kind == "attempts" else "History",
                "task_id": task_id,
                "rows": rows[:PAGE],
                "next_url": f"{base}?cursor={rows[PAGE - 1][last]}" if len(rows) > PAGE else None,
                "first_url": base if after else None,
            }

        self._page(req, resp, "task_rows.html", build)

    def on_get_task_attempts(self, req, resp, task_id: str) -> None:
        self._task_rows(req, resp, task_id, "attempts")

    def on_get_task_history(self, req, resp, task_id: str) -> None:
        self._task_rows(req, resp, task_id, "history")

    def on_get_keys(self, req, resp) -> None:
        def build(s: Scope) -> dict:
            given = {n: req.get_param(n) for n in ("state", "prefix", "cursor")}
            query = {n: KEY_QUERY[n](n, value) for n, value in given.items() if value}
            state, prefix = query.get("state", ""), query.get("prefix", "")
            pages = keypages.KeyPages(s, prefix or None)
            keys, nxt = pages.page(state or None, query.get("cursor"), PAGE)
            more = {k: v for k, v in (("state", state), ("prefix", prefix)) if v}
            return {
                "keys": [serialize.key(k) for k in keys],
                "state": state,
                "prefix": prefix,
                "next_url": "/ui/keys?" + urlencode({**more, "cursor": nxt}) if nxt else None,
            }

        self._page(req, resp, "keys.html", build)

    def on_get_key(self, req, resp, concurrency_key: str) -> None:
        def build(s: Scope) -> dict:
            return {
                "here": "/ui/keys/" + quote(concurrency_key, safe=""),
                "key": serialize.key(s.key(concurrency_key)),
                "tokens": reads.key_tokens(s, concurrency_key),
                "parked": reads.parked_tasks(s, concurrency_key),
            }

        self._page(req, resp, "key.html", build)

    def on_get_workers(self, req, resp) -> None:
        def build(s: Scope) -> dict:
            return {"sessions": reads.sessions(s), "live_seconds": reads.LIVE_SECONDS}

        self._page(req, resp, "workers.html", build)

    def on_get_schedules(self, req, resp) -> None:
        def build(s: Scope) -> dict:
            return {"schedules": [schedule_view(r) for r in schedule_list(s)]}

        self._page(req, resp, "schedules.html", build)

    def on_get_review(self, req, resp) -> None:
        def build(s: Scope) -> dict:
            after = s.task_position(req.get_param("cursor"))
            rows = s.tasks({"state": "NEEDS_REVIEW"}, after, PAGE + 1)
            more = len(rows) > PAGE
            return {
                "tasks": rows[:PAGE],
                "next_url": "/ui/review?cursor=" + rows[PAGE - 1]["public_id"] if more else None,
                "first_url": "/ui/review" if after else None,
            }

        self._page(req, resp, "review.html", build)

    # Actions ---------------------------------------------------------------------------------
    def _form(self, req) -> dict[str, str]:
        """The posted form's fields given once (a field given twice is left out). Read as the
        API reads its bodies, chunked or not (``read_body``)."""
        if req.content_type is None or not req.content_type.startswith(falcon.MEDIA_URLENCODED):
            raise errors.InvalidArgument("a form is expected")
        raw = read_body(req, MAX_FORM_BYTES)
        try:  # a form is ASCII, as Falcon's form handler has it
            form = parse_query_string(raw.decode("ascii"), keep_blank=True, csv=False)
        except ValueError:
            raise errors.InvalidArgument("a form is expected") from None
        return {k: v for k, v in form.items() if isinstance(v, str)}

    def _act(self, req, resp, change) -> None:
        try:
            s = Scope(self.db, self.sessions.principal(self.db, req))
            form = self._form(req)
            self.sessions.check_post(req, form)
            change(s, form)
        except errors.Unauthenticated:
            raise falcon.HTTPSeeOther("/ui/login") from None
        except errors.OrbitError as exc:
            self._error(req, resp, exc)
            return
        raise falcon.HTTPSeeOther(render.back_to(form.get("back", "")))

    def on_post_queue_pause(self, req, resp, queue_id: str) -> None:
        self._act(req, resp, lambda s, f: actions.set_queue_state(s, queue_id, "PAUSED"))

    def on_post_queue_resume(self, req, resp, queue_id: str) -> None:
        self._act(req, resp, lambda s, f: actions.set_queue_state(s, queue_id, "ACTIVE"))

    def on_post_task_cancel(self, req, resp, task_id: str) -> None:
        self._act(req, resp, lambda s, f: actions.cancel_task(s, task_id))

    def on_post_task_resolve(self, req, resp, task_id: str) -> None:
        def change(s: Scope, form: dict[str, str]) -> None:
            fields = {"state": form.get("state"), "note": form.get("note")}
            body = validation.TASK_RESOLVE.parse({k: v for k, v in fields.items() if v})
            actions.resolve_task(s, task_id, body["state"], body["note"])

        self._act(req, resp, change)

    def on_post_schedule_pause(self, req, resp, schedule_id: str) -> None:
        self._act(req, resp, lambda s, f: actions.set_schedule_state(s, schedule_id, "PAUSED"))

    def on_post_schedule_resume(self, req, resp, schedule_id: str) -> None:
        self._act(req, resp, lambda s, f: actions.set_schedule_state(s, schedule_id, "ACTIVE"))


# The dashboard's routes: (path, suffix). Path parameters are checked like the API's.
ROUTES = [
    ("/ui/login", "login"),
    ("/ui/logout", "logout"),
    ("/ui/", "overview"),
    ("/ui/queues", "queues"),
    ("/ui/queues/{queue_id}/pause", "queue_pause"),
    ("/ui/queues/{queue_id}/resume", "queue_resume"),
    ("/ui/tasks", "tasks"),
    ("/ui/tasks/{task_id}", "task"),
    ("/ui/tasks/{task_id}/attempts", "task_attempts"),
    ("/ui/tasks/{task_id}/history", "task_history"),
    ("/ui/tasks/{task_id}/cancel", "task_cancel"),
    ("/ui/tasks/{task_id}/resolve", "task_resolve"),
    ("/ui/keys", "keys"),
    ("/ui/keys/{concurrency_key:path}", "key"),
    ("/ui/workers", "workers"),
    ("/ui/schedules", "schedules"),
    ("/ui/schedules/{schedule_id}/pause", "schedule_pause"),
    ("/ui/schedules/{schedule_id}/resume", "schedule_resume"),
    ("/ui/review", "review"),
]


# A page answers HEAD as it answers GET (Falcon sends no body for HEAD).
for _path, _suffix in ROUTES:
    if hasattr(Dashboard, f"on_get_{_suffix}"):
        setattr(Dashboard, f"on_head_{_suffix}", getattr(Dashboard, f"on_get_{_suffix}"))


def mount(app: falcon.App, database: Database, sessions: Sessions) -> Dashboard:
    """Add the pages to ``app``; the Dashboard also renders the app's errors under /ui/."""
    dashboard = Dashboard(database, sessions, SignInGuard())
    for path, suffix in ROUTES:
        app.add_route(path, dashboard, suffix=suffix)
    app.add_route("/ui", Redirect("/ui/"))
    return dashboard


class Redirect:
    auth_exempt = True

    def __init__(self, to: str) -> None:
        self.to = to

    def on_get(self, req, resp) -> None:
        raise falcon.HTTPSeeOther(self.to)
