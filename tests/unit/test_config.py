"""The server's settings read from the environment: each loop's interval may be 0 (off), a
setting that turns nothing off must be more than 0, and a non-number is refused."""

from __future__ import annotations

import pytest

from orbit_shell.server.config import OFF, Config

DSN = {"ORBIT_MYSQL_DSN": "mysql://u@h:1/d"}


@pytest.mark.parametrize(
    ("name", "attribute"),
    [
        ("ORBIT_SWEEP_INTERVAL", "sweep_interval"),
        ("ORBIT_SCHEDULE_INTERVAL", "schedule_interval"),
        ("ORBIT_CLEANUP_INTERVAL", "cleanup_interval"),
        ("ORBIT_SUBMIT_RATE", "submit_rate"),
        ("ORBIT_TRUST_FORWARDED", "trust_forwarded"),
    ],
)
def test_zero_turns_a_loop_or_a_guard_off(name, attribute):
    assert attribute in OFF
    assert getattr(Config.from_env({**DSN, name: "0"}), attribute) == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ORBIT_DB_TIMEOUT", "0"),
        ("ORBIT_SESSION_SECONDS", "0"),
        ("ORBIT_CLEANUP_INTERVAL", "-1"),
        ("ORBIT_DB_TIMEOUT", "soon"),
    ],
)
def test_a_setting_out_of_its_range_is_refused(name, value):
    with pytest.raises(SystemExit):
        Config.from_env({**DSN, name: value})


def test_the_new_settings_have_their_defaults():
    config = Config.from_env(DSN)
    assert (config.db_timeout, config.cleanup_interval, config.session_seconds) == (60, 60, 43200)
    assert config.public_url is None and config.session_secret is None
    assert Config.from_env({**DSN, "ORBIT_PUBLIC_URL": "https://o.example"}).public_url == (
        "https://o.example"
    )
