"""Pages of concurrency keys (``GET /v1/keys``, V1), longest wait first, through indexes only.

A key's wait is since when tasks have waited for it without a break (the key row's
``waiting_since``, which parking sets and a release with nothing left to promote clears); a
held key nothing waits for ranks by since when its holder holds it. Two index-ordered streams
give the busy keys: the namespace's keys by ``waiting_since`` (``ix_concurrency_resources_waiting``)
and its LEASED and RUNNING keyed attempts (``ix_attempts_queue_lease``, as many rows as
attempts in flight). Idle keys come in the order of their first use, along the same index's
``waiting_since IS NULL`` range (its rows end with the key row's id); for a credential
limited to some queues, in byte order from its own queues' tasks (``_idle_in_queues``).
No read walks the parked tasks: each key on a page is then read as ``GET /v1/keys/{key}``
reads it, so its parked count and oldest parked task are exact and its tasks respect the
credential's queues.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Any

from orbit_shell import errors
from orbit_shell.server.scoped import Scope

STATES = ("held", "contended", "idle")
# A page ends at (sort time in microseconds, key); idle keys page in key row order, their time
# 0. The key travels in the cursor (its UTF-8, base64url) and is resolved to its row in the
# namespace. Not the row id: one sequence for the whole server, it told a tenant how many keys
# every tenant had made. A cursor of this form naming no key the credential can see (one never
# used, another namespace's, one of queues outside its scope) is NOT_FOUND, all alike; any
# other string is refused as invalid. (16 digits of microseconds reach past the year 2200; a
# key's 191 characters are at most 764 bytes, 1019 characters of base64url.)
CURSOR_PATTERN = r"^[0-9]{1,16}\.[A-Za-z0-9_-]{1,1019}$"
EPOCH = dt.datetime(1970, 1, 1)
# The lanes a task of an idle key may be in (NULL: finished), and the keys a page of idle keys
# of some queues looks at, at most, before it ends with a cursor to go on from.
IDLE_LANES = (None, "READY", "DELAYED")
IDLE_EXAMINED = 1_000


def _micros(at: dt.datetime) -> int:
    return (at - EPOCH) // dt.timedelta(microseconds=1)


def _like(prefix: str | None) -> tuple[str, list[Any]]:
    if not prefix:
        return "", []
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return " AND r.concurrency_key LIKE %s", [escaped + "%"]


def _decode_key(text: str) -> str:
    """A cursor's key: its UTF-8 in base64url without padding (``_encode``)."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8")


def _encode(at: dt.datetime, concurrency_key: str) -> str:
    text = base64.urlsafe_b64encode(concurrency_key.encode("utf-8")).rstrip(b"=").decode()
    return f"{_micros(at)}.{text}"


class KeyPages:
    """One page of keys for one scope; each key as ``Scope.key`` reads it."""

    def __init__(self, scope: Scope, prefix: str | None) -> None:
        self.s = scope
        self.like, self.like_args = _like(prefix)
        self._queues: list[int] | None = None

    def page(self, state: str | None, cursor: str | None, limit: int) -> tuple[list, str | None]:
        if state == "idle" and not self.s.principal.all_queues:
            return self._idle_in_queues(self._after_key(cursor), limit)
        if state == "idle":
            return self._idle(self._after(cursor), limit)
        return self._busy(state, self._after(cursor), limit)

    def _after_key(self, cursor: str | None) -> str:
        """The key a page of idle keys of some queues resumes after ('' from the start)."""
        if cursor is None:
            return ""
        self._after(cursor)  # a key this credential can see, or NOT_FOUND
        return _decode_key(cursor.split(".", 1)[1])

    def _after(self, cursor: str | None) -> tuple[dt.datetime, int] | None:
        """Where a page resumes: the cursor's time and its key's row id."""
        if cursor is None:
            return None
        micros, text = cursor.split(".", 1)
        unseen = errors.NotFound("the cursor names no key this credential can read")
        try:
            key = _decode_key(text)
        except (binascii.Error, UnicodeDecodeError):
            raise unseen from None
        rows = self.s.db.query(
            "SELECT id FROM concurrency_resources WHERE namespace_id = %s AND concurrency_key = %s",
            [self.s.namespace_id, key],
        )
        if not rows or self._visible(key) is None:
            raise unseen
        return EPOCH + dt.timedelta(microseconds=int(micros)), rows[0]["id"]

    # Busy keys: held or contended ------------------------------------------------------------
    def _waiting(self, after: tuple | None, n: int) -> list[dict[str, Any]]:
        at, rid = after or (EPOCH, 0)
        return self.s.db.query(
            "SELECT r.id, r.concurrency_key, r.waiting_since AS sort_at "
            "FROM concurrency_resources r FORCE INDEX (ix_concurrency_resources_waiting) "
            "WHERE r.namespace_id = %s AND r.waiting_since IS NOT NULL "
            "AND (r.waiting_since > %s OR (r.waiting_since = %s AND r.id > %s))"
            + self.like
            + " ORDER BY r.waiting_since, r.id LIMIT %s",
            [self.s.namespace_id, at, at, rid, *self.like_args, n],
        )

    def _held(self, after: tuple | None, n: int, only_unwaited: bool) -> list[dict[str, Any]]:
        """Keys held by the namespace's attempts in flight, by COALESCE(waiting_since, holder
        since); ``only_unwaited`` leaves out keys the waiting stream lists."""
        at, rid = after or (EPOCH, 0)
        if self._queues is None:  # read once per page, not once per chunk
            self._queues = [q["id"] for q in self.s.queues()] or [0]
        queues = self._queues
        marks = ", ".join(["%s"] * len(queues))
        sort = "COALESCE(r.waiting_since, a.created_at)"
        return self.s.db.query(
            f"SELECT r.id, r.concurrency_key, {sort} AS sort_at "
            "FROM attempts a FORCE INDEX (ix_attempts_queue_lease) "
            "JOIN tasks t ON t.id = a.task_id "
            "JOIN concurrency_resources r FORCE INDEX (uq_concurrency_resources_key) "
            "ON r.namespace_id = t.namespace_id AND r.concurrency_key = t.concurrency_key "
            f"WHERE a.queue_id IN ({marks}) AND a.state IN ('LEASED', 'RUNNING') "
            "AND a.concurrency_token > 0 AND (r.holder_attempt_id = a.id OR "
            # A key whose slot 0 is free is listed once, by its lowest held slot (P2).
            "(r.holder_attempt_id IS NULL AND a.concurrency_slot = (SELECT MIN(s.slot) "
            "FROM key_slots s WHERE s.resource_id = r.id AND s.attempt_id IS NOT NULL))) "
            + ("AND r.waiting_since IS NULL " if only_unwaited else "")
            + f"AND ({sort} > %s OR ({sort} = %s AND r.id > %s))"
            + self.like
            + f" ORDER BY {sort}, r.id LIMIT %s",
            [*queues, at, at, rid, *self.like_args, n],
        )

    def _busy(self, state: str | None, after: tuple | None, limit: int) -> tuple[list, str | None]:
        out: list[dict[str, Any]] = []
        last: tuple | None = None
        chunk = limit + 1
        while True:
            rows: list[dict[str, Any]] = []
            if state in (None, "contended"):
                rows += self._waiting(after, chunk)
            if state in (None, "held"):
                rows += self._held(after, chunk, only_unwaited=state is None)
            rows.sort(key=lambda r: (r["sort_at"], r["id"]))
            rows = rows[:chunk]
            for r in rows:
                key = self._visible(r["concurrency_key"])
                after = (r["sort_at"], r["id"])
                if key is None or not self._in_state(key, state):
                    continue
                if len(out) == limit:
                    return out, _encode(*last)
                out.append(key)
                last = (r["sort_at"], r["concurrency_key"])
            if len(rows) < chunk:
                return out, None

    @staticmethod
    def _in_state(key: dict[str, Any], state: str | None) -> bool:
        held = bool(key["holders"])
        if state == "held":
            return held
        if state == "contended":
            return key["parked"] > 0
        return held or key["parked"] > 0

    def _visible(self, concurrency_key: str) -> dict[str, Any] | None:
        try:
            return self.s.key(concurrency_key)
        except errors.NotFound:
            return None

    # Idle keys ----------------------------------------------------------------------------------
    def _idle_in_queues(self, after: str, limit: int) -> tuple[list, str | None]:
        """Idle keys of a credential limited to some queues, in byte order: the keys of its
        own queues' tasks, merged from one stream per queue and lane a task of an idle key
        can be in (finished, READY, DELAYED), each stream read one key at a time along
        ix_tasks_queue_lane_key. Nothing of another queue is read, so a namespace's 30,000
        idle keys of other queues cost nothing (each was read three times, 48 s for an empty
        page); at most IDLE_EXAMINED keys are looked at before the page ends with a cursor."""
        like = ""
        like_args = self.like_args
        if like_args:
            like = " AND concurrency_key LIKE %s"
        streams = [(q, lane) for q in sorted(self.s.principal.queue_ids) for lane in IDLE_LANES]

        def head(stream: tuple[int, str | None], past: str) -> str | None:
            rows = self.s.db.query(
                "SELECT concurrency_key FROM tasks FORCE INDEX (ix_tasks_queue_lane_key) "
                "WHERE queue_id = %s AND lane <=> %s AND concurrency_key > %s"
                + like
                + " ORDER BY concurrency_key LIMIT 1",
                [*stream, past, *like_args],
            )
            return rows[0]["concurrency_key"] if rows else None

        heads = {stream: head(stream, after) for stream in streams}
        out: list[dict[str, Any]] = []
        examined = 0
        while True:
            pending = [k for k in heads.values() if k is not None]
            if not pending:
                return out, None
            key = min(pending, key=lambda k: k.encode("utf-8"))
            if len(out) == limit or examined == IDLE_EXAMINED:
                return out, _encode(EPOCH, after)
            examined += 1
            found = self._visible(key)
            if found is not None and not found["holders"] and not found["parked"]:
                out.append(found)
            after = key
            for stream, at in heads.items():
                if at == key:
                    heads[stream] = head(stream, key)

    def _idle(self, after: tuple | None, limit: int) -> tuple[list, str | None]:
        rid = after[1] if after else 0
        out: list[dict[str, Any]] = []
        last = ""  # the key the page ends at (a key skipped after it is read again next page)
        while True:
            rows = self.s.db.query(
                "SELECT r.id, r.concurrency_key FROM concurrency_resources r "
                "FORCE INDEX (ix_concurrency_resources_waiting) "
                "WHERE r.namespace_id = %s AND r.waiting_since IS NULL AND r.id > %s "
                "AND r.holder_attempt_id IS NULL AND r.slot_holders = 0"
                + self.like
                + " ORDER BY r.id LIMIT %s",
                [self.s.namespace_id, rid, *self.like_args, limit + 1],
            )
            for r in rows:
                key = self._visible(r["concurrency_key"])
                if key is None or key["holders"] or key["parked"]:
                    rid = r["id"]
                    continue
                if len(out) == limit:
                    return out, _encode(EPOCH, last)
                out.append(key)
                rid, last = r["id"], r["concurrency_key"]
            if len(rows) <= limit:
                return out, None
