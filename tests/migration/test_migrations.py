"""Migrations and routines: fresh apply, re-apply, the K11 upgrade path, schema rules."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import pymysql
import pytest

from orbit_shell.engine import db, dberrors, schema
from orbit_shell.engine.schema import routine_name

KEYED = "000005_keyed_concurrency"
POLICIES = "000022_key_policies"
PARKED = "000024_parked_candidates"
UNATTEMPTED = "000025_unattempted_grants"


def _rows(dsn: str, sql: str, args=()):
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()
    finally:
        conn.close()


@contextlib.contextmanager
def _before(dsn: str, migration: str, queue: bool = False) -> Iterator:
    """A cursor on a database migrated up to just before ``migration``, its routines not
    installed; with ``queue``, application 1 and its queue 1 made on it first."""
    earlier = [m for m in schema.migration_ids() if m < migration]
    schema.apply(dsn, until=earlier[-1], install=False)
    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            if queue:
                now = "UTC_TIMESTAMP(6)"
                cur.execute(f"INSERT INTO applications (name, created_at) VALUES ('legacy', {now})")
                cur.execute(
                    f"INSERT INTO queues (public_id, namespace_id, application_id, name, "
                    f"created_at, updated_at) VALUES (REPEAT('a', 32), 1, 1, 'q', {now}, {now})"
                )
            yield cur
    finally:
        conn.close()


def test_schema_sql_is_what_the_migrations_build(fresh_dsn):
    """sql/schema.sql shows the current schema; it must not drift from the migrations.
    Regenerate it with `orbit-migrate snapshot > sql/schema.sql`."""
    version = _rows(fresh_dsn, "SELECT VERSION() AS v")[0]["v"]
    if "MariaDB" not in version:  # SHOW CREATE TABLE's wording differs on MySQL 8
        pytest.skip(f"the snapshot is MariaDB's form; this server is {version}")
    schema.apply(fresh_dsn)
    assert schema.snapshot(fresh_dsn) == schema.SNAPSHOT.read_text(encoding="utf-8")


def test_apply_from_empty_then_again_is_harmless(fresh_dsn):
    first = schema.apply(fresh_dsn)
    assert first == schema.migration_ids()
    assert schema.apply(fresh_dsn) == []
    schema.check(fresh_dsn)
    assert [a for _, a in schema.status(fresh_dsn)] == [True] * len(first)


def test_installed_routines_are_exactly_the_procedure_files(fresh_dsn):
    schema.apply(fresh_dsn)
    assert schema.install_routines(fresh_dsn) == 0  # a second install creates nothing
    rows = _rows(
        fresh_dsn,
        "SELECT routine_name AS n, routine_type AS t, security_type AS s "
        "FROM information_schema.routines WHERE routine_schema = DATABASE()",
    )
    installed = {(r["n"], r["t"]) for r in rows}
    assert installed == {(schema.routine_name(r.name), r.kind) for r in schema.routines()}
    assert {r["s"] for r in rows} == {"DEFINER"}  # W9: procedures run as their definer


def test_h5_a_new_version_installs_beside_the_old_and_prune_drops_the_old(fresh_dsn, tmp_path):
    """Routines are versioned by the digest of their files; a routine calls the others of its
    own version, so two versions run side by side until the old one is pruned."""
    schema.apply(fresh_dsn)
    old = schema.version()
    body = next(r for r in schema.routines() if r.name == "task_submit")
    text = schema.versioned_body(body)
    assert f"CREATE PROCEDURE task_submit__{old}(" in text
    assert f"CALL task_submit_one__{old}(" in text and "task_submit_one(" not in text
    other = "0123456789ab"
    conn = db.connect(fresh_dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(text.replace(f"task_submit__{old}(", f"task_submit__{other}("))
    finally:
        conn.close()
    schema.check(fresh_dsn)  # this version's routines are all there
    assert schema.prune(fresh_dsn) == [other]
    names = {
        r["n"]
        for r in _rows(
            fresh_dsn,
            "SELECT routine_name AS n FROM information_schema.routines "
            "WHERE routine_schema = DATABASE()",
        )
    }
    assert f"task_submit__{other}" not in names and f"task_submit__{old}" in names


def test_routines_run_under_mysql8s_sql_mode_whatever_the_servers_default(fresh_dsn):
    """A routine keeps the sql_mode it was created under. MariaDB's default lacks
    ONLY_FULL_GROUP_BY, which is in MySQL 8's and refuses the claim's old `SELECT COUNT(*) ...
    ORDER BY id FOR UPDATE` (1140, shown here on MariaDB with the mode on): every claim would
    have failed there while every test passed here."""
    schema.apply(fresh_dsn)
    rows = _rows(
        fresh_dsn,
        "SELECT routine_name AS n, sql_mode AS m FROM information_schema.routines "
        "WHERE routine_schema = DATABASE()",
    )
    assert len(rows) == len(schema.routines())
    assert {r["m"] for r in rows} == {db.SQL_MODE}, rows
    assert "ONLY_FULL_GROUP_BY" in _rows(fresh_dsn, "SELECT @@session.sql_mode AS m")[0]["m"]


def test_schema_has_no_foreign_keys_and_every_table_and_column_is_commented(orbit_dsn):
    fks = _rows(
        orbit_dsn,
        "SELECT COUNT(*) AS n FROM information_schema.referential_constraints "
        "WHERE constraint_schema = DATABASE()",
    )
    assert fks[0]["n"] == 0
    tables = _rows(
        orbit_dsn,
        "SELECT table_name AS t, table_comment AS c FROM "
        "information_schema.tables WHERE table_schema = DATABASE() "
        "AND table_name <> '_yoyo_migration' AND table_name NOT LIKE '\\_yoyo%%' "
        "AND table_name <> 'yoyo_lock'",
    )
    assert tables and all(r["c"] for r in tables), [r["t"] for r in tables if not r["c"]]
    columns = _rows(
        orbit_dsn,
        "SELECT table_name AS t, column_name AS c, column_comment AS m "
        "FROM information_schema.columns WHERE table_schema = DATABASE() "
        "AND table_name NOT LIKE '\\_yoyo%%' AND table_name <> 'yoyo_lock'",
    )
    missing = [f"{r['t']}.{r['c']}" for r in columns if not r["m"]]
    assert not missing


def test_tables_are_utf8mb4_and_keys_compare_byte_exactly(orbit_dsn):
    rows = _rows(
        orbit_dsn,
        "SELECT table_name AS t, table_collation AS c FROM "
        "information_schema.tables WHERE table_schema = DATABASE() "
        "AND table_name NOT LIKE '\\_yoyo%%' AND table_name <> 'yoyo_lock'",
    )
    assert {r["c"] for r in rows} == {"utf8mb4_bin"}
    keys = _rows(
        orbit_dsn,
        "SELECT table_name AS t, collation_name AS c FROM "
        "information_schema.columns WHERE table_schema = DATABASE() "
        "AND column_name = 'concurrency_key'",
    )
    assert {r["t"] for r in keys} == {"tasks", "concurrency_resources"}
    assert {r["c"] for r in keys} == {"utf8mb4_bin"}


def test_k11_upgrade_backfills_legacy_rows(fresh_dsn):
    with _before(fresh_dsn, KEYED, queue=True) as cur:
        now = "UTC_TIMESTAMP(6)"
        cur.execute(
            "INSERT INTO tasks (public_id, namespace_id, application_id, queue_id, "
            "idempotency_key, handler, handler_version, payload_version, payload, "
            "business_key, priority, state, lane, max_attempts, available_at, created_at, "
            f"updated_at) VALUES (REPEAT('b', 32), 1, 1, 1, 'k', 'h', 'v1', 'v1', '{{}}', "
            f"'order-7', 5, 'RUNNING', NULL, 3, {now}, {now}, {now})"
        )
        cur.execute(
            "INSERT INTO worker_sessions (public_id, namespace_id, application_id, worker_id, "
            "capacity, registration_sha256, created_at, last_seen_at) VALUES "
            f"(REPEAT('c', 32), 1, 1, 'old-worker', 2, REPEAT('0', 64), {now}, {now})"
        )
        cur.execute(
            "INSERT INTO attempts (public_id, task_id, namespace_id, application_id, "
            "queue_id, session_id, attempt_number, state, lease_expires_at, created_at) "
            f"VALUES (REPEAT('d', 32), 1, 1, 1, 1, 1, 1, 'RUNNING', {now}, {now})"
        )
    with pytest.raises(schema.SchemaMismatch, match="older"):
        schema.check(fresh_dsn)

    schema.apply(fresh_dsn)
    [task] = _rows(fresh_dsn, "SELECT concurrency_key, business_key FROM tasks")
    [attempt] = _rows(fresh_dsn, "SELECT concurrency_token FROM attempts")
    [session] = _rows(fresh_dsn, "SELECT concurrency_keys FROM worker_sessions")
    assert task == {"concurrency_key": "", "business_key": "order-7"}
    assert attempt["concurrency_token"] == 0
    assert session["concurrency_keys"] == 0
    schema.check(fresh_dsn)


def test_h5_existing_keys_keep_limit_1_and_their_permits_slot_0(fresh_dsn):
    """Upgrading to key policies changes no existing key: a key row held before the upgrade
    has limit 1 and its holder's attempt slot 0, and the routines find no policy for it. The
    new columns are added instantly (the migration says ALGORITHM=INSTANT), so the tables are
    not copied under a running server."""
    with _before(fresh_dsn, POLICIES) as cur:
        now = "UTC_TIMESTAMP(6)"
        cur.execute(
            "INSERT INTO concurrency_resources (namespace_id, concurrency_key, token, "
            f"holder_attempt_id, created_at, updated_at) VALUES (1, 'k', 7, 1, {now}, {now})"
        )
        cur.execute(
            "INSERT INTO attempts (public_id, task_id, namespace_id, application_id, "
            "queue_id, session_id, attempt_number, concurrency_token, state, "
            f"lease_expires_at, created_at) VALUES (REPEAT('d', 32), 1, 1, 1, 1, 1, 1, 7, "
            f"'RUNNING', {now}, {now})"
        )
    schema.apply(fresh_dsn)
    [key] = _rows(
        fresh_dsn,
        "SELECT key_limit, slot_holders, holder_attempt_id, token FROM concurrency_resources",
    )
    assert key == {"key_limit": 1, "slot_holders": 0, "holder_attempt_id": 1, "token": 7}
    [attempt] = _rows(fresh_dsn, "SELECT concurrency_slot FROM attempts")
    assert attempt["concurrency_slot"] == 0
    assert not _rows(fresh_dsn, "SELECT * FROM key_slots")
    [limit] = _rows(fresh_dsn, f"SELECT {routine_name('key_policy_value')}(1, 'k', 'limit') AS n")
    assert limit["n"] is None  # no rule: limit 1
    text = (schema.MIGRATIONS_DIR / f"{POLICIES}.sql").read_text()
    assert text.count("  ALGORITHM=INSTANT;") == 2


def test_p3_upgrade_restarts_candidates_a_lowered_limit_left_parked(fresh_dsn):
    """A parked task left its key's candidate is READY again where its key has room; where the
    key is still full it stays parked and stops being the candidate, so a release promotes it."""
    with _before(fresh_dsn, PARKED, queue=True) as cur:
        now = "UTC_TIMESTAMP(6)"
        for task, key in ((1, "room"), (2, "full"), (3, "kept")):
            cur.execute(
                "INSERT INTO tasks (public_id, namespace_id, application_id, queue_id, "
                "idempotency_key, handler, handler_version, payload_version, payload, "
                "concurrency_key, priority, state, lane, max_attempts, available_at, "
                f"created_at, updated_at) VALUES (REPEAT('{task}', 32), 1, 1, 1, '{key}', "
                f"'h', 'v1', 'v1', '{{}}', '{key}', 5, 'WAITING', "
                f"IF({task} = 3, 'READY', 'BLOCKED'), 3, {now}, {now}, {now})"
            )
        # room: limit 2, one holder; full: limit 1, one holder; kept: a READY candidate.
        for key, limit, task in (("room", 2, 1), ("full", 1, 2), ("kept", 1, 3)):
            cur.execute(
                "INSERT INTO concurrency_resources (namespace_id, concurrency_key, token, "
                "holder_attempt_id, candidate_task_id, key_limit, created_at, updated_at) "
                f"VALUES (1, '{key}', 1, IF('{key}' = 'kept', NULL, 9), {task}, {limit}, "
                f"{now}, {now})"
            )
    schema.apply(fresh_dsn)
    keys = _rows(
        fresh_dsn,
        "SELECT r.concurrency_key AS k, r.candidate_task_id AS candidate, t.lane "
        "FROM concurrency_resources r JOIN tasks t ON t.concurrency_key = r.concurrency_key "
        "ORDER BY r.concurrency_key",
    )
    assert keys == [
        {"k": "full", "candidate": None, "lane": "BLOCKED"},
        {"k": "kept", "candidate": 3, "lane": "READY"},
        {"k": "room", "candidate": 1, "lane": "READY"},
    ]


def test_upgrade_requeues_tasks_granted_without_an_attempt(fresh_dsn):
    """A task a grant left RUNNING or LEASED with no attempt of its own (current attempt 0, or
    an id of another row) is WAITING again with a history row: unkeyed READY, keyed its key's
    READY candidate once the key's holder, attempt 0, is freed; the permit of attempt 0 goes.
    A task running on its own attempt is left as it is."""
    with _before(fresh_dsn, UNATTEMPTED, queue=True) as cur:
        now = "UTC_TIMESTAMP(6)"
        cur.execute(
            "INSERT INTO namespaces (id, application_id, environment_id, name, created_at) "
            f"VALUES (1, 1, 1, 'ns', {now})"
        )
        # 1: unkeyed, RUNNING on attempt 0; 2: keyed 'k', RUNNING on attempt 0, holding the
        # key; 3: LEASED on attempt 5, which is task 4's; 4: RUNNING on its own attempt 5.
        for task, key, state, current in (
            (1, "", "RUNNING", 0),
            (2, "k", "RUNNING", 0),
            (3, "", "LEASED", 5),
            (4, "", "RUNNING", 5),
        ):
            cur.execute(
                "INSERT INTO tasks (id, public_id, namespace_id, application_id, queue_id, "
                "idempotency_key, handler, handler_version, payload_version, payload, "
                "concurrency_key, priority, state, lane, max_attempts, attempts_used, "
                "current_attempt_id, available_at, created_at, updated_at) VALUES "
                f"({task}, REPEAT('{task}', 32), 1, 1, 1, 'i{task}', 'h', 'v1', 'v1', '{{}}', "
                f"'{key}', 5, '{state}', NULL, 3, 1, {current}, {now}, {now}, {now})"
            )
        cur.execute(
            "INSERT INTO attempts (id, public_id, task_id, namespace_id, application_id, "
            "queue_id, session_id, attempt_number, concurrency_token, state, "
            f"lease_expires_at, created_at) VALUES (5, REPEAT('e', 32), 4, 1, 1, 1, 1, 1, 0, "
            f"'RUNNING', {now} + INTERVAL 30 SECOND, {now})"
        )
        cur.execute(
            "INSERT INTO concurrency_resources (namespace_id, concurrency_key, token, "
            f"holder_attempt_id, created_at, updated_at) VALUES (1, 'k', 3, 0, {now}, {now})"
        )
        cur.execute(
            "INSERT INTO permits (attempt_id, kind, scope_id, expires_at, created_at) VALUES "
            f"(0, 'QUEUE', 1, {now}, {now}), (5, 'QUEUE', 1, {now}, {now})"
        )
    schema.apply(fresh_dsn)
    tasks = _rows(
        fresh_dsn,
        "SELECT id, state, lane, attempts_used, current_attempt_id FROM tasks ORDER BY id",
    )
    assert tasks == [
        {"id": 1, "state": "WAITING", "lane": "READY", "attempts_used": 0,
         "current_attempt_id": None},
        {"id": 2, "state": "WAITING", "lane": "READY", "attempts_used": 0,
         "current_attempt_id": None},
        {"id": 3, "state": "WAITING", "lane": "READY", "attempts_used": 0,
         "current_attempt_id": None},
        {"id": 4, "state": "RUNNING", "lane": None, "attempts_used": 1, "current_attempt_id": 5},
    ]  # fmt: skip
    [key] = _rows(fresh_dsn, "SELECT holder_attempt_id, candidate_task_id, token FROM "
                  "concurrency_resources")  # fmt: skip
    assert key == {"holder_attempt_id": None, "candidate_task_id": 2, "token": 3}
    history = _rows(fresh_dsn, "SELECT task_id, event, from_state, to_state FROM task_history")
    assert history == [
        {"task_id": t, "event": "REQUEUED", "from_state": s, "to_state": "WAITING"}
        for t, s in ((1, "RUNNING"), (2, "RUNNING"), (3, "LEASED"))
    ]
    assert _rows(fresh_dsn, "SELECT attempt_id FROM permits") == [{"attempt_id": 5}]


def test_server_refuses_newer_schema_and_foreign_routines(fresh_dsn):
    schema.apply(fresh_dsn)
    conn = db.connect(fresh_dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO _yoyo_migration (migration_hash, migration_id, applied_at_utc) "
                "VALUES (REPEAT('f', 64), '999999_from_the_future', UTC_TIMESTAMP())"
            )
        # A newer version's migration: accepted while this version's routines are installed
        # (a rolling upgrade), refused once they are gone.
        schema.check(fresh_dsn)
        with conn.cursor() as cur:
            cur.execute(f"DROP PROCEDURE {schema.routine_name('task_submit')}")
        with pytest.raises(schema.SchemaMismatch, match="newer"):
            schema.check(fresh_dsn)
        with conn.cursor() as cur:
            cur.execute("DELETE FROM _yoyo_migration WHERE migration_id LIKE '999999%'")
        with pytest.raises(schema.SchemaMismatch, match="routines"):
            schema.check(fresh_dsn)
        schema.install_routines(fresh_dsn)
        schema.check(fresh_dsn)
    finally:
        conn.close()


def test_check_on_an_empty_database_says_to_migrate(fresh_dsn):
    with pytest.raises(schema.SchemaMismatch, match="orbit-migrate up"):
        schema.check(fresh_dsn)


def test_every_routine_file_has_a_contract_header_and_procedures_have_exit_handlers():
    for routine in schema.routines():
        assert routine.body.lstrip().startswith("--"), routine.name
        if "START TRANSACTION" in routine.body:
            assert (
                "DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END"
                in routine.body
            )


def test_helper_routines_never_control_transactions():
    """Helpers run inside their caller's transaction: a COMMIT there would split it. (The
    word, not a part of one: a header may say what READ COMMITTED does.)"""
    for routine in schema.routines():
        if "Helper" in routine.body.split("CREATE", 1)[0]:
            assert not re.search(r"\b(COMMIT|START TRANSACTION)\b", routine.body), routine.name


def test_pymysql_reads_signal_errors_as_1644(orbit_dsn):
    conn = db.connect(orbit_dsn)
    try:
        with conn.cursor() as cur, pytest.raises(pymysql.MySQLError) as info:
            cur.execute(f"CALL {routine_name('task_cancel')}(0, REPEAT('0', 32), 'test')")
        assert info.value.args[0] == dberrors.ER_SIGNAL_EXCEPTION
        assert str(info.value.args[1]).startswith("NOT_FOUND:")
    finally:
        conn.close()


def test_id_parameters_match_their_columns_so_lookups_use_the_index(orbit_dsn):
    """A utf8mb4 parameter compared with an ascii_bin column converts the column and cannot use
    its index: every public-id lookup became a table scan (start took 5.6 ms instead of 0.7 ms
    with 13k attempts). Public ids, keys, hashes and fingerprints must be declared ascii_bin."""
    rows = _rows(
        orbit_dsn,
        "SELECT specific_name AS r, parameter_name AS p, "
        "character_set_name AS c, collation_name AS k FROM information_schema.parameters "
        "WHERE specific_schema = DATABASE() AND (parameter_name LIKE '%%public_id' "
        "OR parameter_name IN ('p_idempotency_key', 'p_fingerprint', 'p_secret_sha256', "
        "'p_registration', 'p_scopes'))",
    )
    assert len(rows) >= 20
    wrong = [f"{r['r']}.{r['p']}" for r in rows if (r["c"], r["k"]) != ("ascii", "ascii_bin")]
    assert not wrong


def binlog_safe_declaration(body: str) -> bool:
    """The characteristics before the body name DETERMINISTIC, NO SQL or READS SQL DATA."""
    head = " ".join(re.sub(r"--[^\n]*", "", body).split()).upper()
    head = head.split(" RETURN ", 1)[0].split(" BEGIN ", 1)[0]
    return bool(
        "NO SQL" in head or "READS SQL DATA" in head or re.search(r"(?<!NOT )DETERMINISTIC", head)
    )


def test_functions_declare_what_binary_logging_requires():
    """With binary logging on (MySQL 8's default), CREATE FUNCTION is refused (1418) unless the
    function declares DETERMINISTIC, NO SQL or READS SQL DATA (or the server trusts every
    function creator). The test servers keep no binlog, so they would not refuse it."""
    assert not binlog_safe_declaration(
        "CREATE FUNCTION f() RETURNS INT NOT DETERMINISTIC MODIFIES SQL DATA RETURN 1"
    )
    functions = [r for r in schema.routines() if r.kind.upper() == "FUNCTION"]
    assert functions  # new_public_id
    for routine in functions:
        assert binlog_safe_declaration(routine.body), (
            f"{routine.name} must declare DETERMINISTIC, NO SQL or READS SQL DATA"
        )


def test_batch_loops_read_each_item_out_of_the_batch_once():
    """MariaDB keeps JSON as text: every JSON_EXTRACT over a batch reads the whole batch. The
    per-item loops read a field at a time that way (13 per item in task_submit_many): a
    submission of 100 naming 10 keys spent 327 ms, 45 once each item was read out once (bench
    `phases`). Fields come from the item, not the batch."""
    for routine in schema.routines():
        code = re.sub(r"--[^\n]*", "", routine.body)
        assert code.count("JSON_EXTRACT(p_items") <= 1, routine.name
