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
        promote(orbit_dsn, epoch_file=tmp_path / "epoch.json", say=lambda line: None)
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
