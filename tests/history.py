"""A history checker for keyed concurrency, pure Python.

Feed it what clients and the resource saw; it verifies, per key, that tokens strictly increase
in grant order, that server-valid holding intervals of one slot never overlap, that no permit
was granted while the key already had its limit of holders (the limit in force at that grant,
P1), and that the fenced resource accepted, per key and slot, only writes carrying the highest
token seen so far; over all tasks, that nothing accepted was lost, nothing succeeded twice and
nothing appeared that was not submitted.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Grant:
    key: str
    token: int
    attempt: str
    task: str
    start: float  # when the permit was granted
    end: float  # when it ended (result, cancel, recovery); inf while held
    slot: int = 0  # P2: the permit's slot of the key
    limit: int = 1  # P1: the key's limit in force when the permit was granted


def recorded(row: dict[str, Any], limit: int) -> Grant:
    """A grant as the database recorded it: a row with the attempt's ``task``, key ``k``,
    ``attempt``, ``token``, ``slot``, ``created_at`` and ``finished_at`` (UTC; none while held),
    under the key's ``limit`` then."""

    def utc(value: dt.datetime) -> float:
        return value.replace(tzinfo=dt.UTC).timestamp()

    end = utc(row["finished_at"]) if row["finished_at"] else math.inf
    return Grant(
        row["k"],
        row["token"],
        row["attempt"],
        row["task"],
        utc(row["created_at"]),
        end,
        row["slot"],
        limit,
    )


@dataclass(frozen=True)
class Write:
    key: str
    token: int
    seq: int  # order the resource applied (or refused) it in
    accepted: bool
    slot: int = 0


@dataclass
class History:
    grants: list[Grant] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    submitted: set[str] = field(default_factory=set)
    final_states: dict[str, str] = field(default_factory=dict)
    successes: dict[str, int] = field(default_factory=dict)
    # Whether each grant's start is its grant instant (the server's history). A worker's start
    # is when its handler began: holders of other slots of one key (P1) may begin in another
    # order than they were granted, so tokens are then held to start order per slot only.
    starts_are_grants: bool = True

    def check(self) -> dict[str, int]:
        """Return figures; raise AssertionError naming the first violation."""
        by_key: dict[str, list[Grant]] = defaultdict(list)
        for g in self.grants:
            by_key[g.key].append(g)
        overlaps = 0
        most = 0
        for key, grants in by_key.items():
            grants.sort(key=lambda g: (g.start, g.token))
            tokens = [g.token for g in grants]
            assert not self.starts_are_grants or all(
                a < b for a, b in zip(tokens, tokens[1:], strict=False)
            ), f"{key}: tokens not strictly increasing in grant order: {tokens}"
            by_slot: dict[int, list[Grant]] = defaultdict(list)
            for g in grants:
                by_slot[g.slot].append(g)
            for slot, held in by_slot.items():
                tokens = [g.token for g in held]
                assert all(a < b for a, b in zip(tokens, tokens[1:], strict=False)), (
                    f"{key} slot {slot}: tokens not strictly increasing: {tokens}"
                )
                for a, b in zip(held, held[1:], strict=False):
                    if b.start < a.end:
                        overlaps += 1
                        raise AssertionError(
                            f"{key} slot {slot}: holding intervals overlap: {a} and {b}"
                        )
            # Holders when each permit was granted, itself included, against its limit then.
            for i, g in enumerate(grants):
                holders = 1 + sum(1 for h in grants[:i] if h.end > g.start)
                most = max(most, holders)
                assert holders <= g.limit, (
                    f"{key}: {holders} holders at the grant of {g}, limit {g.limit}"
                )
        stale_accepted = 0
        highest: dict[tuple[str, int], int] = defaultdict(int)
        for w in sorted(self.writes, key=lambda w: w.seq):
            if w.accepted:
                if w.token < highest[w.key, w.slot]:
                    stale_accepted += 1
                highest[w.key, w.slot] = max(highest[w.key, w.slot], w.token)
        assert stale_accepted == 0, "the resource accepted a write with a stale token"
        unknown = set(self.final_states) - self.submitted
        assert not unknown, f"tasks that were never submitted: {sorted(unknown)[:3]}"
        settled = {"SUCCEEDED", "FAILED", "CANCELLED", "DEADLINE_EXCEEDED", "NEEDS_REVIEW"}
        lost = [t for t in self.submitted if self.final_states.get(t) not in settled]
        assert not lost, f"{len(lost)} accepted tasks did not settle, e.g. {lost[:3]}"
        twice = [t for t, n in self.successes.items() if n > 1]
        assert not twice, f"tasks that succeeded twice: {twice[:3]}"
        return {
            "grants": len(self.grants),
            "keys": len(by_key),
            "overlaps": overlaps,
            "most_holders": most,
            "writes": sum(w.accepted for w in self.writes),
            "stale_rejected": sum(not w.accepted for w in self.writes),
            "lost": len(lost),
        }
