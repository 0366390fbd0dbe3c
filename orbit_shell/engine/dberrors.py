"""What the database's errors mean to Orbit: a routine's ``SIGNAL`` as the OrbitError it
names, deadlock-class errors as retryable (None), a lost or read-only server as UNAVAILABLE
with a Retry-After (the primary may have changed), and anything else as INTERNAL."""

from __future__ import annotations

import pymysql

from orbit_shell import errors

ER_SIGNAL_EXCEPTION = 1644
ER_LOCK_DEADLOCK = 1213
ER_LOCK_WAIT_TIMEOUT = 1205
ER_SP_DOES_NOT_EXIST = 1305
# What InnoDB answers when a deadlock or a lock-wait timeout meets a statement while it waits
# for a table's AUTO-INC lock (a multi-row INSERT ... SELECT takes it under
# innodb_autoinc_lock_mode 1, MariaDB's default): the transaction is rolled back like any
# deadlock victim, so it is retried like one.
ER_AUTOINC_READ_FAILED = 1467
RETRYABLE = {ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, ER_AUTOINC_READ_FAILED}
# Client-side codes for "no server" / "connection lost": CR_CONN_HOST_ERROR, CR_SERVER_GONE,
# CR_SERVER_LOST, CR_SERVER_LOST_EXTENDED (+ ER_CON_COUNT_ERROR, server shutdown in progress).
CONNECTION_ERRORS = {2003, 2006, 2013, 2055, 1040, 1053, 1927}
# The server refuses writes: read_only (ER_OPTION_PREVENTS_STATEMENT, ER_READ_ONLY_MODE). A
# primary fenced by a promotion answers this; the shell then looks for the new primary.
READ_ONLY_ERRORS = {1290, 1836}
# Seconds a client is told to wait (Retry-After) when no writable server is at hand.
SWITCH_RETRY_AFTER = 1


def signal_error(text: str) -> errors.OrbitError:
    """The OrbitError of a routine's ``SIGNAL SQLSTATE '45000'`` text, ``'CODE: message'``."""
    name, _, message = text.partition(":")
    cls = errors.BY_CODE.get(name.strip())
    if cls is None:
        return errors.Internal()
    return cls(message.strip() or None)


def code_of(exc: pymysql.MySQLError) -> int | None:
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None


def map_error(exc: pymysql.MySQLError) -> errors.OrbitError | None:
    """Translate a pymysql error into an OrbitError; None for deadlock-class errors."""
    code = code_of(exc)
    if code == ER_SIGNAL_EXCEPTION:
        return signal_error(str(exc.args[1]) if len(exc.args) > 1 else "")
    if code in RETRYABLE:
        return None
    if code in CONNECTION_ERRORS or isinstance(exc, pymysql.err.InterfaceError):
        # Gone, refused or silent past the timeout: the host is forgotten (_switching), and
        # the next try looks for the primary again.
        error = errors.Unavailable("database unavailable")
        error.retry_after = SWITCH_RETRY_AFTER
        return error
    if code in READ_ONLY_ERRORS:
        error = errors.Unavailable("the database server takes no writes now; retry shortly")
        error.retry_after = SWITCH_RETRY_AFTER
        return error
    return errors.Internal()


def switching(exc: pymysql.MySQLError) -> bool:
    """Whether an error says the primary may have changed: it is gone or takes no writes."""
    code = code_of(exc)
    return (
        code in CONNECTION_ERRORS
        or code in READ_ONLY_ERRORS
        or isinstance(exc, pymysql.err.InterfaceError)
    )
