"""Schedule rules and the scheduler loop (K10).

Rules are ``{"cron": "*/5 * * * *", "timezone": "Europe/Berlin"}`` (croniter, DST-aware in
the zone) or ``{"interval_seconds": 60}``. A version's ``definition.task`` holds fixed
submission fields (no templates); its ``concurrency_key`` is inherited by every task it makes.

Exactly one task per fire, enforced by the database: a fire submits its task through
``task_submit`` with the idempotency key ``schedule:<schedule id>:<fire time>``, then
``schedule_advance`` moves ``next_fire_at`` with a compare-and-set. Racing schedulers, or one
that dies between the two calls, end with the same single task.

Missed fires (the server was down): the schedule fires **once**, for the latest due slot, and
continues from the first slot after now. No storm of catch-up tasks.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import threading
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from croniter import CroniterBadDateError, croniter

from orbit_shell import errors, task_shapes, validation
from orbit_shell.engine import batches
from orbit_shell.engine.db import Database
from orbit_shell.errors import field_error

log = logging.getLogger("orbit.scheduler")
UTC = dt.UTC
FIRE_PREFIX = "schedule:"


@dataclass(frozen=True)
class Rule:
    kind: str  # CRON or INTERVAL
    cron: str | None = None
    timezone: str | None = None
    interval_seconds: int | None = None

    def as_json(self) -> dict[str, Any]:
        if self.kind == "CRON":
            return {"cron": self.cron, "timezone": self.timezone}
        return {"interval_seconds": self.interval_seconds}

    def next_after(self, after: dt.datetime) -> dt.datetime:
        """The first fire strictly after ``after`` (naive UTC in, naive UTC out)."""
        if self.kind == "INTERVAL":
            return after + dt.timedelta(seconds=self.interval_seconds)
        zone = zoneinfo.ZoneInfo(self.timezone)
        local = after.replace(tzinfo=UTC).astimezone(zone)
        nxt = croniter(self.cron, local).get_next(dt.datetime)
        return nxt.astimezone(UTC).replace(tzinfo=None)

    def latest_due(self, scheduled: dt.datetime, now: dt.datetime) -> dt.datetime:
        """The latest slot at or before ``now``, starting from the due ``scheduled`` slot."""
        if self.kind == "INTERVAL":
            step = dt.timedelta(seconds=self.interval_seconds)
            return scheduled + step * ((now - scheduled) // step)
        latest = scheduled
        while True:
            nxt = self.next_after(latest)
            if nxt > now:
                return latest
            latest = nxt


# The simple cron form the OpenAPI document shows: each field a number in its range or *,
# the day of month at most 28 so that every expression of this form fires. The server takes
# every five-field expression croniter reads (lists, ranges, steps, names) and refuses one
# that never fires.
CRON_PATTERN = (
    r"^(\*|[0-5]?[0-9]) (\*|1?[0-9]|2[0-3]) (\*|[1-9]|1[0-9]|2[0-8]) "
    r"(\*|[1-9]|1[0-2]) (\*|[0-6])$"
)


class RuleCheck(validation.Check):
    """Validates a schedule rule object; cron by croniter, time zone by the IANA database."""

    @property
    def schema(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "description": "{cron, timezone} or {interval_seconds}",
            "oneOf": [
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["interval_seconds"],
                    "properties": {"interval_seconds": validation.Integer(1, 31_536_000).schema},
                },
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["cron"],
                    "properties": {
                        "cron": {
                            "type": "string",
                            "maxLength": 120,
                            "pattern": CRON_PATTERN,
                            "description": "five-field cron (croniter); the pattern is its "
                            "simple form, ranges, lists, steps and names are accepted too",
                        },
                        # A rule, not an enum of every zone: two names can map to one
                        # identifier in a client generator, which then refuses the document.
                        "timezone": {
                            "type": "string",
                            "description": "An IANA time zone name (Europe/Berlin), default "
                            "UTC; the server checks it against its zone database",
                            "pattern": r"^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$",
                            "maxLength": 64,
                        },
                    },
                },
            ],
        }

    def __call__(self, name: str, value: Any) -> Rule:
        if not isinstance(value, dict):
            raise field_error(name, "must be an object")
        if set(value) == {"interval_seconds"}:
            seconds = validation.Integer(1, 31_536_000)(
                f"{name}.interval_seconds", value["interval_seconds"]
            )
            return Rule("INTERVAL", interval_seconds=seconds)
        if set(value) - {"cron", "timezone"} or "cron" not in value:
            raise field_error(name, "must be {cron, timezone} or {interval_seconds}")
        expr = value["cron"]
        if (
            not isinstance(expr, str)
            or len(expr) > 120
            or len(expr.split()) != 5
            or not croniter.is_valid(expr)
        ):
            raise field_error(f"{name}.cron", "must be a five-field cron expression")
        zone = value.get("timezone", "UTC")
        try:
            if not isinstance(zone, str) or len(zone) > 64:
                raise ValueError(zone)
            zoneinfo.ZoneInfo(zone)
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            raise field_error(f"{name}.timezone", "must be an IANA time zone name") from None
        rule = Rule("CRON", cron=expr, timezone=zone)
        try:
            rule.next_after(utcnow())
        except CroniterBadDateError:  # valid fields that no date matches: 0 0 31 2 *
            raise field_error(f"{name}.cron", "never fires: no date matches it") from None
        return rule


@functools.cache
def _zones() -> frozenset[str]:
    """The IANA zone names this machine's database knows: what ZoneInfo accepts."""
    return frozenset(zoneinfo.available_timezones() | {"UTC"})


class DefinitionCheck(validation.Check):
    """``{"task": {...}}`` with exactly the submission fields (the same rules, K2 included)."""

    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["task"],
        "properties": {"task": task_shapes.TASK_SUBMIT.schema},
    }

    def __call__(self, name: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict) or set(value) != {"task"}:
            raise field_error(name, "must be an object with exactly one field, task")
        try:
            task = task_shapes.TASK_SUBMIT.parse(value["task"])
        except errors.InvalidArgument as exc:
            details = [{**d, "field": f"{name}.task.{d['field']}"} for d in exc.details]
            raise errors.InvalidArgument(exc.message, details) from None
        return {"task": task}


SCHEDULE_CREATE = validation.Shape(
    {
        "name": validation.Field(validation.Text(1, 100, trimmed=True), required=True),
        "rule": validation.Field(RuleCheck(), required=True),
        "definition": validation.Field(DefinitionCheck(), required=True),
    }
)
SCHEDULE_VERSION = validation.Shape(
    {
        "rule": validation.Field(RuleCheck()),
        "definition": validation.Field(DefinitionCheck()),
    },
    min_fields=1,
)


def utcnow() -> dt.datetime:
    return dt.datetime.now(UTC).replace(tzinfo=None)


def rule_of(row: dict[str, Any]) -> Rule:
    return Rule(row["rule_kind"], row["cron"], row["timezone"], row["interval_seconds"])


def fire_key(schedule_public_id: str, fire_time: dt.datetime) -> str:
    return f"{FIRE_PREFIX}{schedule_public_id}:{fire_time.isoformat()}"


# From the due index, in its order, to each schedule's current version by key: left to
# itself the optimizer started from schedule_versions (a full scan of every version ever
# written) and sorted the joined rows, definition text and all, in an on-disk temporary
# table, on every tick of every server process (sql/README.md, "Set-based paths").
DUE = (
    "SELECT s.id, s.public_id, s.namespace_id, s.next_fire_at, s.current_version, v.rule_kind, "
    "v.cron, v.timezone, v.interval_seconds, v.definition "
    "FROM schedules s FORCE INDEX (ix_schedules_due) "
    "STRAIGHT_JOIN schedule_versions v FORCE INDEX (PRIMARY) "
    "ON v.schedule_id = s.id AND v.version = s.current_version "
    "WHERE s.state = 'ACTIVE' AND s.next_fire_at <= UTC_TIMESTAMP(6) ORDER BY s.next_fire_at "
    "LIMIT %s"
)


def fire_due(database: Database, limit: int = 100, now=utcnow) -> int:
    """Fire every due schedule once; return how many fires were handled."""
    handled = 0
    for row in database.query(DUE, (limit,)):
        rule = rule_of(row)
        current = now()
        fire_time = rule.latest_due(row["next_fire_at"], current)
        task = json.loads(row["definition"])["task"]
        queues = database.query(
            "SELECT id FROM queues WHERE public_id = %s AND namespace_id = %s",
            (task["queue_id"], row["namespace_id"]),
        )
        task_id = None
        if queues:
            try:
                made = batches.submit_one(
                    database,
                    "task_submit",
                    row["namespace_id"],
                    queues[0]["id"],
                    fire_key(row["public_id"], fire_time),
                    *batches.submit_fields(task),
                    "system:scheduler",
                    row["id"],
                    row["current_version"],
                    fire_time,
                )
                task_id = made["task_id"]
            except (errors.QuotaExceeded, errors.IdempotencyConflict) as exc:
                log.warning(
                    "fire skipped: %s",
                    exc.message,
                    extra={"action": "schedule.fire", "schedule_id": row["public_id"]},
                )
        else:
            log.warning(
                "fire skipped: queue gone",
                extra={"action": "schedule.fire", "schedule_id": row["public_id"]},
            )
        database.call(
            "schedule_advance",
            row["id"],
            row["next_fire_at"],
            fire_time,
            row["current_version"],
            task_id,
            rule.next_after(current),
        )
        handled += 1
    return handled


class Scheduler(threading.Thread):
    """Runs :func:`fire_due` about every ``interval`` seconds until stopped."""

    def __init__(
        self, database: Database, interval: float = 1.0, active: Callable[[], bool] = lambda: True
    ) -> None:
        super().__init__(name="orbit-scheduler", daemon=True)
        self.database, self.interval = database, interval
        self.active = active  # whether this process leads: only the leader fires
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            if not self.active():
                continue
            try:
                fire_due(self.database)
            except errors.OrbitError as exc:
                log.warning(
                    "scheduler pass failed: %s", exc.message, extra={"action": "schedule.fire"}
                )

    def stop(self) -> None:
        self.stopped.set()
