"""The benchmark's targets against one run's figures: what was met, read off the results, so that a
run says it itself instead of a reader comparing numbers by hand. Parts not run are left out."""

from __future__ import annotations

from typing import Any


def _row(name: str, value: str, target: str, met: bool | None, note: str = "") -> dict[str, Any]:
    """``met`` is None when the run did not measure what the target names."""
    return {"target": name, "value": value, "wanted": target, "met": met, "note": note}


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    if "procedure" in results:
        ratio = results["procedure"]["ratio_to_ceiling_bound"]
        notes = []
        if "procedure_floor" in results and "skipped" not in results["procedure_floor"]:
            notes.append(
                "the cheapest spec-shaped cycle (not Orbit) reached "
                f"{results['procedure_floor']['ratio_to_ceiling_bound']:.2f}"
            )
        delay = float(results.get("server", {}).get("flush_delay_ms", 0))
        if delay:
            notes.append(f"on an emulated disk whose flush takes {delay:g} ms more, not this one")
        note = "; ".join(notes)
        rows.append(
            _row(
                "procedure, single calls",
                f"{ratio:.2f} of ceiling/commits",
                ">= 0.6",
                ratio >= 0.6,
                note,
            )  # fmt: skip
        )
    by_name = {r["scenario"]: r for r in results.get("e2e", [])}
    for name, wanted in (("unkeyed", 1000), ("keys1000", 800)):
        if name in by_name:
            rate = by_name[name]["tasks_per_s"]
            rows.append(
                _row(f"e2e {name}", f"{rate:,.0f} tasks/s", f">= {wanted:,}", rate >= wanted)
            )
    if results.get("blocked"):
        base, last = results["blocked"][0], results["blocked"][-1]
        times = last["claim_p99_ms"] / base["claim_p99_ms"]
        at_million = last["parked"] >= 1_000_000
        rows.append(
            _row(
                f"claim p99 at {last['parked']:,} parked",
                f"{times:.2f}x of 0 parked",
                "<= 2x at 1M",
                times <= 2 if at_million else None,
                "" if at_million else "1M parked takes --large",
            )  # fmt: skip
        )
    peer = results.get("peer", {})
    if "keys0" in peer:
        ratios = peer["keys0"]["ratio"]
        plain = {w: r for w, r in ratios.items() if "prefetch" not in w}
        for label, ways in (("without prefetch", plain), ("any way", ratios)):
            best = max(ways, key=ways.get)
            rows.append(
                _row(
                    f"peer unkeyed, {label}",
                    f"{ways[best]:.2f}x ({best})",
                    ">= 2.5x",
                    ways[best] >= 2.5,
                )  # fmt: skip
            )
    if "keys1000" in peer:
        ratios = peer["keys1000"]["ratio"]
        worst = min(ratios, key=ratios.get)
        rows.append(
            _row(
                "peer 1,000 keys, every way",
                f"{ratios[worst]:.2f}x at least ({worst})",
                ">= 10x",
                ratios[worst] >= 10,
            )  # fmt: skip
        )
    parts = [results[p] for p in ("procedure", "procedure_app_per_thread", "procedure_batched")
             if p in results] + results.get("e2e", [])  # fmt: skip
    parts = [p for p in parts if "deadlocks" in p]
    if parts:
        deadlocks = sum(p["deadlocks"] for p in parts)
        rows.append(
            _row(
                "deadlocks while submit, claim and result run", str(deadlocks), "0", deadlocks == 0
            )  # fmt: skip
        )
    return rows


def text(rows: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"target {r['target']}: {r['value']} (wanted {r['wanted']}): "
        + {True: "met", False: "NOT MET", None: "not measured"}[r["met"]]
        + (f"; {r['note']}" if r["note"] else "")
        for r in rows
    )
