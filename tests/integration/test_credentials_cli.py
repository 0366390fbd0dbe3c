"""`orbit-admin credential` and `orbit-admin revoke` (SPEC 1: scopes and a queue scope of all
queues or a list; revoked credentials refused), and the names every `orbit-admin` command takes
(SPEC 7), driven through the CLI and checked through the API over the real database."""

from __future__ import annotations

import json
import secrets

import pymysql
import pytest

from orbit_shell.cli.admin import main as admin
from orbit_shell.engine import db


@pytest.fixture
def cli(orbit_dsn, monkeypatch, capsys):
    """Run `orbit-admin` against the session database: (exit code, stdout, stderr)."""
    monkeypatch.setenv("ORBIT_MYSQL_DSN", orbit_dsn)

    def run(*args: str) -> tuple[int, str, str]:
        code = admin(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def names(tenant) -> list[str]:
    return [
        "--application",
        tenant.application,
        "--environment",
        "test",
        "--namespace",
        tenant.namespace,
    ]


def credentials_count(database) -> int:
    return database.query("SELECT COUNT(*) AS n FROM credentials")[0]["n"]


def bearer(path) -> dict[str, str]:
    return {"Authorization": "Bearer " + json.loads(path.read_text())["token"]}


def test_a_credential_limited_to_one_queue_and_one_scope(cli, client, tenant, tmp_path):
    other = client.simulate_post("/v1/queues", headers=tenant.headers, json={"name": "other"}).json[
        "data"
    ]["queue_id"]
    out = tmp_path / "reader.json"
    code, printed, _ = cli(
        "credential",
        *names(tenant),
        "--scopes",
        "queues:manage",
        "--queue-ids",
        tenant.queue_id,
        "--output",
        str(out),
    )
    assert code == 0, printed
    document = json.loads(out.read_text())
    assert document["scopes"] == ["queues:manage"]
    assert document["queue_ids"] == [tenant.queue_id]
    assert document["credential_id"] in printed
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    reader = bearer(out)

    assert client.simulate_get(f"/v1/queues/{tenant.queue_id}", headers=reader).status_code == 200
    # Outside the queue scope: 404, as if the queue did not exist (SPEC 1).
    assert client.simulate_get(f"/v1/queues/{other}", headers=reader).status_code == 404
    listed = client.simulate_get("/v1/queues", headers=reader).json["data"]
    assert [q["queue_id"] for q in listed] == [tenant.queue_id]
    # Without the scope: 403.
    refused = client.simulate_post(
        "/v1/tasks",
        headers={**reader, "Idempotency-Key": "cli-1"},
        json={"queue_id": tenant.queue_id, "handler": "h", "payload": {}},
    )
    assert refused.status_code == 403, refused.text


def test_a_credential_over_every_queue_and_its_revocation(cli, client, tenant, tmp_path):
    out = tmp_path / "ops.json"
    code, _, _ = cli(
        "credential", *names(tenant), "--scopes", "queues:manage,tasks:read", "--output", str(out)
    )
    assert code == 0
    document = json.loads(out.read_text())
    assert document["queue_ids"] == "all"
    ops = bearer(out)
    made = client.simulate_post("/v1/queues", headers=ops, json={"name": "made-later"})
    assert made.status_code == 201
    assert (
        client.simulate_get(f"/v1/queues/{made.json['data']['queue_id']}", headers=ops).status_code
        == 200
    )

    code, printed, _ = cli("revoke", "--credential-id", document["credential_id"])
    assert code == 0
    first = json.loads(printed)
    assert first["credential_id"] == document["credential_id"] and first["revoked_at"]
    assert client.simulate_get("/v1/queues", headers=ops).status_code == 401
    # The tenant's own credential is untouched; revoking again keeps the first time.
    assert client.simulate_get("/v1/queues", headers=tenant.headers).status_code == 200
    code, printed, _ = cli("revoke", "--credential-id", document["credential_id"])
    assert code == 0 and json.loads(printed)["revoked_at"] == first["revoked_at"]


@pytest.mark.parametrize(
    "extra, code, message",
    [
        (["--scopes", "tasks:read,tasks:delete"], "INVALID_ARGUMENT", "unknown: tasks:delete"),
        (["--scopes", " , "], "INVALID_ARGUMENT", "scopes must be"),
        (["--scopes", "tasks:read", "--queue-ids", "XYZ"], "INVALID_ARGUMENT", "queue ids"),
        (["--scopes", "tasks:read", "--queue-ids", ","], "INVALID_ARGUMENT", "queue ids"),
        (["--scopes", "tasks:read", "--queue-ids", "0" * 32], "NOT_FOUND", "queue not found"),
    ],
)
def test_bad_credential_requests_are_refused_and_create_nothing(
    cli, database, tenant, tmp_path, extra, code, message
):
    before = credentials_count(database)
    out = tmp_path / "never.json"
    status, _, err = cli("credential", *names(tenant), *extra, "--output", str(out))
    assert status == 1
    assert code in err and message in err
    assert credentials_count(database) == before
    assert not out.exists()


def test_a_queue_of_another_namespace_is_not_found(cli, database, tenant_factory, tmp_path):
    mine, theirs = tenant_factory(), tenant_factory()
    before = credentials_count(database)
    status, _, err = cli(
        "credential",
        *names(mine),
        "--scopes",
        "tasks:read",
        "--queue-ids",
        theirs.queue_id,
        "--output",
        str(tmp_path / "x.json"),
    )
    assert status == 1 and "NOT_FOUND" in err
    assert credentials_count(database) == before


def test_unknown_namespace_and_unknown_or_malformed_credential(cli, tenant, tmp_path):
    status, _, err = cli(
        "credential",
        "--application",
        tenant.application,
        "--environment",
        "test",
        "--namespace",
        "no-such-ns",
        "--scopes",
        "tasks:read",
        "--output",
        str(tmp_path / "x"),
    )
    assert status == 1 and "NOT_FOUND: namespace not found" in err
    status, _, err = cli("revoke", "--credential-id", "0" * 16)
    assert status == 1 and "NOT_FOUND" in err
    # Longer than an id: refused before the database (a CHAR(16) parameter would cut it).
    status, _, err = cli("revoke", "--credential-id", tenant.token.split("_")[1] + "00")
    assert status == 1 and "INVALID_ARGUMENT" in err


def tenant_rows(database) -> dict:
    """What an orbit-admin command could have written: tenants, queues, credentials, quotas
    and MySQL accounts."""
    return database.query(
        "SELECT (SELECT COUNT(*) FROM applications) AS applications,"
        " (SELECT COUNT(*) FROM environments) AS environments,"
        " (SELECT COUNT(*) FROM namespaces) AS namespaces, (SELECT COUNT(*) FROM queues) AS queues,"
        " (SELECT COUNT(*) FROM credentials) AS credentials,"
        # Every application's quotas in one number (GROUP_CONCAT stops at 1,024 bytes on MySQL).
        " (SELECT SUM(CRC32(CONCAT(id, ':', COALESCE(max_active_attempts, '-'), ':',"
        "  COALESCE(max_unfinished, '-')))) FROM applications) AS quotas,"
        " (SELECT COUNT(*) FROM mysql.user WHERE user = 'name_probe') AS accounts"
    )[0]


# Per command, the names it takes. A name with a space at its end was the padded name of an
# existing tenant to the database: "app " got app's credential, quota or worker account.
NAME_FIELDS = {
    "bootstrap": ("--application", "--environment", "--namespace", "--queue"),
    "credential": ("--application", "--environment", "--namespace"),
    "worker-account": ("--application", "--environment", "--namespace"),
    "set-quota": ("--application",),
}
BAD_NAMES = [
    (" ", "must not start or end with whitespace"),  # appended to the tenant's own name
    ("\tx", "must not contain control characters"),
    ("x" * 101, "must be 1 to 100 characters"),  # was INTERNAL: too long for the parameter
]


@pytest.mark.parametrize(
    "command, field, bad, message",
    [(c, f, b, m) for c, fields in NAME_FIELDS.items() for f in fields for b, m in BAD_NAMES],
)
def test_spec7_a_name_the_database_would_pad_or_cut_is_refused_and_changes_nothing(
    cli, database, tenant, tmp_path, command, field, bad, message
):
    given = {
        "--application": tenant.application,
        "--environment": "test",
        "--namespace": tenant.namespace,
        "--queue": "default",
    }
    given[field] = given[field] + bad if bad == " " else bad
    args = [command, *(a for f in NAME_FIELDS[command] for a in (f, given[f]))]
    out = tmp_path / "never.json"
    args += {
        "bootstrap": ["--output", str(out)],
        "credential": ["--scopes", "tasks:read", "--output", str(out)],
        "worker-account": ["--user", "name_probe", "--output", str(out)],
        "set-quota": ["--max-unfinished", "7"],
    }[command]
    before = tenant_rows(database)
    status, _, err = cli(*args)
    assert status == 1
    assert f"INVALID_ARGUMENT: {field}: {message}" in err
    assert tenant_rows(database) == before
    assert not out.exists()


def test_spec7_a_label_with_a_control_character_is_refused(cli, database, tenant, tmp_path):
    before = tenant_rows(database)
    status, _, err = cli(
        "credential", *names(tenant), "--scopes", "tasks:read", "--label", "a\nb",
        "--output", str(tmp_path / "never.json"),
    )  # fmt: skip
    assert status == 1 and "INVALID_ARGUMENT: --label: must not contain control" in err
    assert tenant_rows(database) == before


def test_l4_worker_account_leaves_an_account_it_did_not_make_alone(
    cli, database, server, tenant, tmp_path
):
    """A user name that a MySQL account has already, made by hand (as the server's own or
    root is), is refused: the command would have set its password, left its grants as they
    were and bound it to one namespace. An account the command made is made again."""
    user, password = "by_hand_" + secrets.token_hex(3), secrets.token_urlsafe(12)
    schema_name = db.parse_dsn(database.dsn)["database"]
    admin_conn = db.connect(database.dsn)
    try:
        with admin_conn.cursor() as cur:
            cur.execute("CREATE USER %s@'localhost' IDENTIFIED BY %s", (user, password))
            cur.execute(f"GRANT SELECT ON `{schema_name}`.* TO %s@'localhost'", (user,))
        out = tmp_path / "never.json"
        args = ["worker-account", "--user", user, "--host", "localhost", *names(tenant)]
        status, _, err = cli(*args, "--output", str(out))
        assert status == 1
        assert f"STATE_CONFLICT: a MySQL account named {user} exists" in err
        assert not out.exists()
        [bound] = database.query(
            "SELECT COUNT(*) AS n FROM worker_accounts WHERE account_user = %s", (user,)
        )
        assert bound["n"] == 0
        own = pymysql.connect(
            host=server.host, port=server.port, unix_socket=server.socket, user=user,
            password=password, database=schema_name,
        )  # fmt: skip
        own.close()  # the password it had still opens it
        made = "orbit_worker_" + secrets.token_hex(3)
        for _ in range(2):
            status, _, err = cli(
                "worker-account", "--user", made, "--host", "localhost", *names(tenant),
                "--output", str(tmp_path / "w.json"),
            )  # fmt: skip
            assert status == 0, err
    finally:
        with admin_conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@'localhost'", (user,))
        admin_conn.close()


@pytest.mark.parametrize("command", ["set-quota", "worker-account"])
def test_a_malformed_dsn_is_named_not_a_traceback(cli, monkeypatch, tenant, tmp_path, command):
    monkeypatch.setenv("ORBIT_MYSQL_DSN", "orbit-db:3306")
    args = {
        "set-quota": ["--application", tenant.application],
        "worker-account": ["--user", "never", *names(tenant), "--output", str(tmp_path / "w")],
    }[command]
    status, _, err = cli(command, *args)
    assert status == 2
    assert (
        err
        == "orbit-admin: ORBIT_MYSQL_DSN must look like mysql://user:password@host:port/database\n"
    )
