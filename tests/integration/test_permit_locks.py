"""Claims of different keys never deadlock over the permits table.

A claim that grants a key whose previous permit is delete-marked (the key was released, in the
same transaction by a report that claims, or not yet purged) takes a gap lock of
``uq_permits_exclusive`` in the uniqueness check. With an AUTO_INCREMENT id and
``innodb_autoinc_lock_mode`` 1 (MariaDB's default), another claim's multi-row ``INSERT ...
SELECT`` held the table's AUTO-INC lock while it waited for that gap, and the gap's owner then
waited for the AUTO-INC lock: the hot-key benchmark's deadlocks (1213, or 1467 for the victim
that waited for the AUTO-INC lock). The interleaving is replayed statement by statement on the
table as the migrations leave it, and on the table before ``000014_permits_by_attempt`` as the
control that shows the cycle.
"""

from __future__ import annotations

import threading
import time

import pymysql
import pytest

from orbit_shell.engine import db, schema

# Resource ids far above any a test makes, so the shared database's own permits never meet them.
BASE = 1 << 62
INSERT = (
    "INSERT INTO permits (attempt_id, kind, scope_id, exclusive_resource_id, expires_at, created_at) "
)


def _begin(conn) -> None:
    with conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 10")
        cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cur.execute("START TRANSACTION")


def _permit(attempt: int, kind: str, resource: int | None) -> str:
    exclusive = "NULL" if resource is None else str(BASE + resource)
    scope = str(BASE + resource) if resource is not None else "1"
    return f"SELECT {BASE + attempt}, '{kind}', {scope}, {exclusive}, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)"


def _waiting(observer, connection_id: int) -> bool:
    with observer.cursor() as cur:
        cur.execute(
            "SELECT trx_state FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = %s",
            (connection_id,),
        )
        row = cur.fetchone()
    return bool(row) and row["trx_state"] == "LOCK WAIT"


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
                    cur.execute(INSERT + _permit(4, "QUEUE", None) + " UNION ALL " + _permit(4, "KEY", 15))
                b.commit()
                out["b"] = "ok"
            except pymysql.MySQLError as exc:
                b.rollback()
                out["b"] = str(exc.args[0])

        thread = threading.Thread(target=claim_b)
        thread.start()
        deadline = time.monotonic() + 10
        while not _waiting(setup, b_id):
            assert time.monotonic() < deadline, f"the second claim never waited for the gap: {out}"
            # InnoDB refreshes its information_schema tables only when they were last read more
            # than 0.1 s before: polled faster, they keep what the first read saw.
            time.sleep(0.15)
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


def test_k5_claims_of_different_keys_meet_at_a_permit_gap_without_a_deadlock(orbit_dsn):
    assert replay(orbit_dsn) == {"a": "ok", "b": "ok"}


def test_k5_the_auto_increment_permits_table_deadlocked_there(fresh_dsn):
    """The control: the same statements on the table before 000014 close the cycle."""
    before = [m for m in schema.migration_ids() if m < "000014"]
    schema.apply(fresh_dsn, until=before[-1], install=False)
    out = replay(fresh_dsn)
    assert sorted(out.values()) in (["1213", "ok"], ["1467", "ok"]), out


@pytest.mark.parametrize("index", ["PRIMARY", "uq_permits_attempt", "uq_permits_exclusive"])
def test_permits_keep_the_indexes_routines_of_both_versions_name(orbit_dsn, index):
    """The routines of the version before 000014 name uq_permits_attempt in FORCE INDEX; it
    stays while they may run (a rolling upgrade, H5)."""
    conn = db.connect(orbit_dsn)
    with conn.cursor() as cur:
        cur.execute("SHOW INDEX FROM permits WHERE Key_name = %s", (index,))
        assert cur.fetchall()
    conn.close()
