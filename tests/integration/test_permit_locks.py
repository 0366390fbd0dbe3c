"""Claims of different keys never wait for each other at the permits table.

A key's permit is deleted when the key is released and inserted again when it is granted.
While the old entry was delete-marked, the uniqueness check of ``uq_permits_exclusive`` took
shared next-key locks on it (gap included) and on the entry after it; and with an
AUTO_INCREMENT id and ``innodb_autoinc_lock_mode`` 1 (MariaDB's default) a claim's multi-row
``INSERT ... SELECT`` held the table's AUTO-INC lock while it waited for such a gap, whose owner
then waited for the AUTO-INC lock: the hot-key benchmark's deadlocks (1213, or 1467 for a
victim that waited for the AUTO-INC lock). The interleaving is replayed statement by statement
on the table as the migrations leave it, and on the table before ``000014_permits_by_attempt``
as the control that shows the cycle.
"""

from __future__ import annotations

import threading
import time

import pymysql

from orbit_shell.engine import db, schema
from tests.engine import lock_waiting

# Resource ids far above any a test makes, so the shared database's own permits never meet them.
BASE = 1 << 62
INSERT = (
    "INSERT INTO permits (attempt_id, kind, scope_id, exclusive_resource_id, expires_at, "
    "created_at) "
)


def _begin(conn) -> None:
    with conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 10")
        cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cur.execute("START TRANSACTION")


def _permit(attempt: int, kind: str, resource: int | None) -> str:
    exclusive = "NULL" if resource is None else str(BASE + resource)
    scope = str(BASE + resource) if resource is not None else "1"
    now = "UTC_TIMESTAMP(6)"
    return f"SELECT {BASE + attempt}, '{kind}', {scope}, {exclusive}, {now}, {now}"


def replay(dsn: str) -> dict[str, str]:
    """Run the interleaving; return each side's outcome ('ok' or the MySQL error number)."""
    setup = db.connect(dsn)
    with setup.cursor() as cur:
        cur.execute("DELETE FROM permits WHERE attempt_id >= %s", (BASE,))
        cur.execute(INSERT + _permit(1, "KEY", 10) + " UNION ALL " + _permit(2, "KEY", 20))
    a = db.connect(dsn, autocommit=False)
    b = db.connect(dsn, autocommit=False)
    out: dict[str, str] = {}
    try:
        _begin(a)
        _begin(b)
        with a.cursor() as cur:
            # A report that claims: it releases key 20 and grants it again (simple inserts).
            cur.execute("DELETE FROM permits WHERE attempt_id = %s", (BASE + 2,))
            cur.execute(INSERT + _permit(3, "QUEUE", None))
            cur.execute(INSERT + _permit(3, "KEY", 20))
        with b.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID() AS id")
            b_id = cur.fetchone()["id"]

        def claim_b():  # another claim's set-based insert; key 15 lies in key 20's gap
            try:
                with b.cursor() as cur:
                    both = _permit(4, "QUEUE", None) + " UNION ALL " + _permit(4, "KEY", 15)
                    cur.execute(INSERT + both)
                b.commit()
                out["b"] = "ok"
            except pymysql.MySQLError as exc:
                b.rollback()
                out["b"] = str(exc.args[0])

        thread = threading.Thread(target=claim_b)
        thread.start()
        deadline = time.monotonic() + 10
        while "b" not in out:  # B ends, or waits for A
            if lock_waiting(setup, b_id):
                out["b_waited"] = "yes"
                break
            assert time.monotonic() < deadline, "the second claim neither ended nor waited"
            time.sleep(0.15)  # lock_waiting: slower than InnoDB's refresh
        try:
            with a.cursor() as cur:  # A's next grant
                cur.execute(INSERT + _permit(5, "QUEUE", None))
            a.commit()
            out["a"] = "ok"
        except pymysql.MySQLError as exc:
            a.rollback()
            out["a"] = str(exc.args[0])
        thread.join(15)
        assert not thread.is_alive()
    finally:
        for conn in (a, b):  # their locks go with them before the rows are removed
            conn.close()
        with setup.cursor() as cur:
            cur.execute("DELETE FROM permits WHERE attempt_id >= %s", (BASE,))
        setup.close()
    return out


def test_k5_a_claim_of_another_key_never_waits_for_a_released_permit(orbit_dsn):
    """B's insert ends while A, which released and granted key 20 again, is still open."""
    assert replay(orbit_dsn) == {"a": "ok", "b": "ok"}


def test_k5_the_auto_increment_permits_table_deadlocked_there(fresh_dsn):
    """The control: the same statements on the table before 000014 close the cycle."""
    before = [m for m in schema.migration_ids() if m < "000014"]
    schema.apply(fresh_dsn, until=before[-1], install=False)
    out = replay(fresh_dsn)
    assert out.pop("b_waited") == "yes"
    assert sorted(out.values()) in (["1213", "ok"], ["1467", "ok"]), out


def test_permits_have_one_index_and_no_routine_names_another(orbit_dsn):
    """000015 drops uq_permits_attempt, the primary key's columns again, kept by 000014 for
    the FORCE INDEX of the routines before it: permits are keyed by attempt and nothing else,
    so no unique index on the resource is left for a claim to wait in, and no routine of this
    version may name an index the table no longer has."""
    conn = db.connect(orbit_dsn)
    with conn.cursor() as cur:
        cur.execute("SHOW INDEX FROM permits")
        indexes = {(r["Key_name"], r["Non_unique"]) for r in cur.fetchall()}
    conn.close()
    assert indexes == {("PRIMARY", 0)}
    for path in schema.PROCEDURES_DIR.glob("*.sql"):
        assert "uq_permits_attempt" not in path.read_text(), path.name
