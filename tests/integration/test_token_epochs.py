"""Token epochs (H1): a promoted primary grants every key a token above every token an earlier
primary could have granted, whether or not the promoted server saw those grants; a key that
reaches the end of its epoch's range is refused as an exhausted key is (K7)."""

from __future__ import annotations

import pytest

from tests.conftest import set_epoch
from tests.engine import Engine

EPOCH = 2**40


@pytest.fixture
def epoch(database):
    """Set the database's token epoch for a test; epoch 0 again afterwards."""
    yield lambda n: set_epoch(database, n)
    set_epoch(database, 0)


def _granted(eng: Engine, session: str, keys: list[str]) -> dict[str, int]:
    for key in keys:
        eng.submit(key)
    grants = eng.claim(session, len(keys))
    assert len(grants) == len(keys)
    for g in grants:
        eng.start(session, g["attempt_id"])
        eng.result(session, g["attempt_id"])
    return {g["concurrency_key"]: g["concurrency_token"] for g in grants}


@pytest.mark.parametrize("keys", [["e/one"], ["e/a", "e/b", "e/c"]], ids=["one", "group"])
def test_h1_a_new_epoch_starts_every_key_above_the_old_epochs_tokens(eng, epoch, keys):
    """A claim of one takes the per-item grant, a claim of several the set-based one."""
    session, _ = eng.hello(capacity=len(keys))
    assert set(_granted(eng, session, keys).values()) == {1}
    # What the promoted server may lack: grants up to the end of epoch 0 on the old primary.
    for key in keys:
        eng.force(
            "UPDATE concurrency_resources SET token = %s WHERE namespace_id = %s "
            "AND concurrency_key = %s",
            EPOCH - 2,
            eng.t.namespace_id,
            key,
        )
    epoch(1)
    assert _granted(eng, session, keys) == dict.fromkeys(keys, EPOCH)
    assert _granted(eng, session, keys) == dict.fromkeys(keys, EPOCH + 1)
    epoch(7)
    assert _granted(eng, session, keys) == dict.fromkeys(keys, 7 * EPOCH)


def test_h1_a_key_at_the_end_of_its_epoch_is_refused_not_carried_into_the_next(
    eng, epoch, database
):
    session, _ = eng.hello(capacity=2)
    epoch(3)
    _granted(eng, session, ["end/k"])
    eng.force(
        "UPDATE concurrency_resources SET token = %s WHERE namespace_id = %s "
        "AND concurrency_key = 'end/k'",
        4 * EPOCH - 1,  # epoch 3's last token
        eng.t.namespace_id,
    )
    refused, free = eng.submit("end/k"), eng.submit("end/free")
    assert [g["task_id"] for g in eng.claim(session, 2)] == [free]
    assert eng.claim(session, 2) == []
    assert eng.task(refused)["state"] == "WAITING"
    assert eng.resource("end/k")["token"] == 4 * EPOCH - 1
    history = database.query(
        "SELECT event FROM task_history WHERE task_id = %s", (eng.task(refused)["id"],)
    )
    assert [h["event"] for h in history].count("TOKEN_SPACE_EXHAUSTED") == 1


def test_h1_promotion_sees_positions_and_refuses_a_lagging_target():
    from orbit_shell.cli.promote import ahead, gtid_position

    assert gtid_position("0-1-100,1-2-7") == {0: 100, 1: 7}
    assert gtid_position("") == {}
    assert ahead({0: 101}, {0: 100}) and not ahead({0: 100}, {0: 100, 1: 3})
    assert ahead({1: 1}, {0: 100})


def test_h1_promote_refuses_a_server_that_is_not_a_replica(orbit_dsn, tmp_path):
    from orbit_shell.cli.promote import PromoteError, promote

    before = _epoch_of(orbit_dsn)
    with pytest.raises(PromoteError, match="is not a replica"):
        promote(
            orbit_dsn,
            epoch_file=tmp_path / "epoch.json",
            say=lambda line: None,
            old_primary_lost=True,
        )
    assert _epoch_of(orbit_dsn) == before and not (tmp_path / "epoch.json").exists()


def _epoch_of(dsn: str) -> int:
    from orbit_shell.engine import db

    conn = db.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT epoch FROM token_epoch")
            return cur.fetchone()["epoch"]
    finally:
        conn.close()


def test_h1_promote_reads_and_checks_the_epoch_file_before_it_changes_anything(orbit_dsn, tmp_path):
    """A malformed epoch file used to be read after the old primary was fenced and the
    target's replication stopped: every server read-only, the API answering 503."""
    from orbit_shell.cli.promote import PromoteError, promote

    bad = tmp_path / "epoch.json"
    for text in ("{not json", '{"epoch": "7"}', '{"epoch": -1}', "[]", '{"other": 1}'):
        bad.write_text(text)
        with pytest.raises(PromoteError, match="epoch"):
            promote(orbit_dsn, old_primary_lost=True, epoch_file=bad, say=lambda line: None)
        assert bad.read_text() == text
    with pytest.raises(PromoteError, match="--old-primary"):  # nobody named, nobody lost
        promote(orbit_dsn, epoch_file=tmp_path / "e.json", say=lambda line: None)
    with pytest.raises(PromoteError, match="--repl-user"):
        promote(orbit_dsn, None, (orbit_dsn,), old_primary_lost=True, say=lambda line: None)
    with pytest.raises(PromoteError, match="mysql://"):
        promote("postgres://x/y", old_primary_lost=True, say=lambda line: None)


def _mysql_args(server) -> list[str]:
    return ["-u", server.user, *(["--socket", server.socket] if server.socket else [])] + (
        ["-h", server.host, "-P", str(server.port)] if not server.socket else []
    )


def test_h1_a_restore_from_backup_then_raise_epoch_keeps_every_token_going_up(
    server, fresh_dsn, tmp_path
):
    """A dump taken before further grants, restored: every key's token is back at its value
    at backup time. ``orbit-admin raise-epoch`` before traffic makes the next token of each
    key exceed every token granted before the restore; without it the next token repeats one
    the resource has already seen (the test shows both)."""
    import shutil
    import subprocess
    from urllib.parse import urlparse

    from orbit_shell.cli.admin import main as admin
    from orbit_shell.engine import schema
    from orbit_shell.engine.db import Database
    from tests.conftest import make_tenant

    name = urlparse(fresh_dsn).path.strip("/")
    schema.apply(fresh_dsn)
    database = Database(fresh_dsn)
    try:
        eng = Engine(database, make_tenant(database, tmp_path))
        session, _ = eng.hello(capacity=3)
        keys = ["r/a", "r/b", "r/c"]
        granted: dict[str, list[int]] = {k: [] for k in keys}

        def grant_round() -> dict[str, int]:
            tokens = _granted(eng, session, keys)
            for k, t in tokens.items():
                granted[k].append(t)
            return tokens

        grant_round()
        dump = subprocess.run(
            [shutil.which("mariadb-dump") or "mysqldump", *_mysql_args(server)]
            + ["--single-transaction", name],
            check=True,
            capture_output=True,
        ).stdout
        for _ in range(3):  # grants the backup does not hold
            grant_round()
        restore = [shutil.which("mariadb") or "mysql", *_mysql_args(server), name]

        def restored() -> None:
            subprocess.run(restore, input=dump, check=True, capture_output=True)
            database.close()

        restored()
        assert grant_round() == dict.fromkeys(keys, 2)  # without the raise: seen before
        restored()
        assert admin(["raise-epoch", "--target", fresh_dsn]) == 0
        first = grant_round()
        for k in keys:
            assert first[k] > max(granted[k][:-1]), (k, granted[k])
            assert first[k] >= EPOCH
        assert _epoch_of(fresh_dsn) == 1
    finally:
        database.close()


def test_h1_raise_epoch_refuses_a_replica_and_a_bad_epoch_file(orbit_dsn, tmp_path):
    from orbit_shell.cli.promote import PromoteError, raise_epoch

    bad = tmp_path / "epoch.json"
    bad.write_text('{"epoch": 99999999999}')
    before = _epoch_of(orbit_dsn)
    with pytest.raises(PromoteError, match="epoch"):
        raise_epoch(orbit_dsn, bad, say=lambda line: None)
    assert _epoch_of(orbit_dsn) == before
