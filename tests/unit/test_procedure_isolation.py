"""Every transaction a routine starts runs at READ COMMITTED (sql/README.md, "Transactions and
isolation"; SPEC 9: gap locks on the polling index are where MySQL queues deadlock).

`SET TRANSACTION ISOLATION LEVEL ...` applies to the session's next transaction only, and in
autocommit mode any statement that reads or writes a table is a transaction of its own: a
session lookup or a temporary table's `DELETE` placed between the two spends the setting, and
the `START TRANSACTION` after it runs at the session's REPEATABLE READ. Eleven procedures did
that, the claim and the batch procedures among them; with one application per thread the
procedure benchmark then counted a deadlock on next-key locks in another queue's range of
`ix_tasks_queue_due` (`bench/README.md`)."""

from __future__ import annotations

import re

from orbit_shell.engine import schema

SET_RC = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;"


def statements(body: str) -> list[str]:
    """The routine's statements in order, comments dropped, whitespace collapsed."""
    code = re.sub(r"--[^\n]*", "", body)
    return [" ".join(s.split()) + ";" for s in code.split(";") if s.strip()]


def test_each_start_transaction_directly_follows_set_transaction_read_committed():
    starting = 0
    for routine in schema.routines():
        found = statements(routine.body)
        for i, statement in enumerate(found):
            if not statement.endswith("START TRANSACTION;"):
                continue
            starting += 1
            before = found[i - 1] if i else ""
            assert before.endswith(SET_RC), (
                f"{routine.name}: the statement before START TRANSACTION is {before!r}; "
                f"put {SET_RC} right before it"
            )
    assert starting >= 20  # the check saw the procedures' transactions
