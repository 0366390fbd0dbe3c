"""What a durable commit costs on this machine's disk, and a disk whose flush takes longer.

The issue calls the ceiling "the durable-commit limit of this machine" and sets the
procedure-level target against it. Here a flush (``fdatasync``) returns in tens of
microseconds, so at 8 connections the ceiling counts the two cores' statements, not flushes.
:func:`flush_us` measures the disk's own flush; ``bench/run --flush-delay-ms N`` starts the
private server with ``slowflush.c`` preloaded, so that each of mariadbd's flushes returns N ms
later (the data is flushed as before), the way a disk without a write cache or a network volume
answers. Figures from such a run are the emulated disk's, not this machine's, and say so.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "slowflush.c"
DELAY_VARIABLE = "ORBIT_BENCH_FLUSH_DELAY_US"


class SlowDiskError(RuntimeError):
    pass


def build(directory: Path) -> Path:
    """Compile the preload library into ``directory`` (again when its source is newer).

    Raises:
        SlowDiskError: no C compiler, or the compile failed.
    """
    library = directory / "slowflush.so"
    if library.exists() and library.stat().st_mtime >= SOURCE.stat().st_mtime:
        return library
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SlowDiskError("--flush-delay-ms needs a C compiler (cc or gcc) to build slowflush.c")
    directory.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(SOURCE), "-ldl"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SlowDiskError(f"cannot build slowflush.c: {done.stderr.strip()}")
    return library


def environment(directory: Path, delay_ms: float) -> dict[str, str]:
    """The server's added environment for a flush ``delay_ms`` slower than the disk's."""
    return {"LD_PRELOAD": str(build(directory)), DELAY_VARIABLE: str(round(delay_ms * 1000))}


def flush_us(directory: Path, rounds: int = 200) -> float:
    """Median microseconds of a 4 KiB write and ``fdatasync`` in ``directory`` (the disk's own:
    this process has nothing preloaded)."""
    path = directory / "flush-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        times = []
        for i in range(rounds):
            os.pwrite(fd, b"\0" * 4096, (i % 16) * 4096)
            began = time.perf_counter()
            os.fdatasync(fd)
            times.append((time.perf_counter() - began) * 1e6)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times)
