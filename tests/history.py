"""A history checker for keyed concurrency, pure Python.

Feed it what clients and the resource saw; it verifies, per key, that tokens strictly increase
in grant order, that server-valid holding intervals never overlap, and that the fenced resource
accepted only writes carrying the highest token seen so far; over all tasks, that nothing
accepted was lost, nothing succeeded twice and nothing appeared that was not submitted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Grant:
    key: str
    token: int
    attempt: str
    task: str
    start: float  # when the permit was granted
    end: float  # when it ended (result, cancel, recovery); inf while held


@dataclass(frozen=True)
class Write:
    key: str
    token: int
    seq: int  # order the resource applied (or refused) it in
    accepted: bool


@dataclass
class History:
    grants: list[Grant] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    submitted: set[str] = field(default_factory=set)
    final_states: dict[str, str] = field(default_factory=dict)
    successes: dict[str, int] = field(default_factory=dict)

    def check(self) -> dict[str, int]:
        """Return figures; raise AssertionError naming the first violation."""
        by_key: dict[str, list[Grant]] = defaultdict(list)
        for g in self.grants:
            by_key[g.key].append(g)
        overlaps = 0
        for key, grants in by_key.items():
            grants.sort(key=lambda g: (g.start, g.token))
            tokens = [g.token for g in grants]
            assert all(a < b for a, b in zip(tokens, tokens[1:], strict=False)), (
                f"{key}: tokens not strictly increasing in grant order: {tokens}"
            )
            for a, b in zip(grants, grants[1:], strict=False):
                if b.start < a.end:
                    overlaps += 1
                    raise AssertionError(f"{key}: holding intervals overlap: {a} and {b}")
        stale_accepted = 0
        highest: dict[str, int] = defaultdict(int)
        for w in sorted(self.writes, key=lambda w: w.seq):
            if w.accepted:
                if w.token < highest[w.key]:
                    stale_accepted += 1
                highest[w.key] = max(highest[w.key], w.token)
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
            "writes": sum(w.accepted for w in self.writes),
            "stale_rejected": sum(not w.accepted for w in self.writes),
            "lost": len(lost),
        }
