"""The peer part: Orbit's SDK worker and Procrastinate drain the same no-op jobs with one
worker of concurrency 10."""

from __future__ import annotations

import statistics

from e2e import e2e
from engine_parts import Bench


def peer(bench: Bench, url: str, jobs: int, rounds: int = 3) -> dict:
    """Orbit and Procrastinate drain the same no-op jobs with one worker of concurrency 10, in
    the same run; unkeyed, and over 1,000 keys (Procrastinate's `lock`).

    A drain of 2,000 no-op jobs lasts seconds, and one drain of either side moved by half from
    one run to the next on this shared machine. Unkeyed, Procrastinate and Orbit's ways
    without prefetch therefore drain ``rounds`` times, alternating, and each figure is the
    median of its rounds (each round's rate is kept in the results; the per-request figures
    are the last round's); the ways with prefetch drain once, in the first round. Over 1,000
    keys Procrastinate takes about a minute a drain and Orbit leads it many times over: one
    round."""
    try:
        import peer_procrastinate
    except ImportError as exc:
        print(f"peer: skipped ({exc}); pip install 'procrastinate[psycopg]'", flush=True)
        return {"skipped": str(exc)}
    out = {}
    # Orbit's worker: over HTTP or the direct MySQL transport; without prefetch, one batch
    # ahead (10), and 4x its concurrency ahead (40, Celery's default prefetch multiplier).
    # Each reports and claims in one call; mysql_apart is the direct way without prefetch
    # reporting and claiming in separate calls (claim_with_report=False).
    ways = {
        f"{transport}{f'_prefetch{ahead}' if ahead else ''}": (transport == "mysql", ahead, True)
        for transport in ("http", "mysql")
        for ahead in (0, 10, 40)
    }
    ways["mysql_apart"] = (True, 0, False)
    for keys in (0, 1000):
        theirs: list[float] = []
        mine: dict[str, list[dict]] = {way: [] for way in ways}
        for n in range(rounds if keys == 0 else 1):
            theirs.append(peer_procrastinate.run(jobs, keys, 10)["jobs_per_s"])
            for way, (direct, prefetch, together) in ways.items():
                if n and prefetch:
                    continue
                mine[way].append(
                    e2e(
                        bench,
                        url,
                        f"drain{keys}-{way}",
                        jobs,
                        keys,
                        producers=8,
                        workers=1,
                        capacity=10,
                        drain=True,
                        prefetch=prefetch,
                        direct=direct,
                        claim_with_report=together,
                    )
                )
        peer_rate = statistics.median(theirs)
        per_round = {way: [r["tasks_per_s"] for r in runs] for way, runs in mine.items()}
        rates = {way: statistics.median(r) for way, r in per_round.items()}
        ratios = {way: rate / peer_rate for way, rate in rates.items()}
        last = {way: runs[-1] for way, runs in mine.items()}
        out[f"keys{keys}"] = {
            "procrastinate_jobs_per_s": peer_rate,
            "orbit_tasks_per_s": rates,
            "rounds": {"procrastinate_jobs_per_s": theirs, "orbit_tasks_per_s": per_round},
            "orbit_attempts_per_request": {
                way: r["attempts_per_request"] for way, r in last.items()
            },
            "orbit_request_ms": {way: r["request_ms"] for way, r in last.items()},
            "orbit_worker_startup_s": {way: r["worker_startup_s"] for way, r in last.items()},
            "orbit_worker_cpu_ms_per_task": {
                way: r["sdk_worker_cpu_ms_per_task"] for way, r in last.items()
            },
            "ratio": ratios,
        }
        if len(theirs) > 1:
            print(
                f"peer keys={keys}, {len(theirs)} rounds: Procrastinate "
                + " / ".join(f"{r:.0f}" for r in theirs)
                + "; Orbit "
                + ", ".join(
                    f"{way} " + " / ".join(f"{r:.0f}" for r in rs)
                    for way, rs in per_round.items()
                    if len(rs) > 1
                ),
                flush=True,
            )
        print(
            f"peer keys={keys}: Procrastinate {peer_rate:.0f}/s; Orbit "
            + ", ".join(f"{way} {rates[way]:.0f}/s ({ratios[way]:.2f}x)" for way in ways)
            + f" (target >= {10 if keys else 2.5}x"
            + (", medians of the rounds)" if len(theirs) > 1 else ")"),
            flush=True,
        )
    return out
