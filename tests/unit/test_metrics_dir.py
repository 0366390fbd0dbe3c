"""The server's private directories (metrics without ``PROMETHEUS_MULTIPROC_DIR``, and the
wakeup sockets): one per server, named for its pid, and a dead server's left behind by
SIGKILL (no ``on_exit``) is removed by the next start."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from orbit_shell.cli import server


def test_a_start_removes_dead_servers_metrics_dirs_and_keeps_live_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # Set, then removed, through monkeypatch: its undo then removes what _metrics_dir sets, so
    # the tests after this one do not scrape in multiprocess mode.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "unset-after-the-test")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        orphan = tmp_path / f"orbit-metrics-{dead.pid}-abc"
        running = tmp_path / f"orbit-metrics-{live.pid}-def"
        unnamed = tmp_path / "orbit-metrics-xyz"  # not this scheme: not ours to judge
        orphan_wake = tmp_path / f"orbit-wake-{dead.pid}-ghi"
        running_wake = tmp_path / f"orbit-wake-{live.pid}-jkl"
        for d in (orphan, running, unnamed, orphan_wake, running_wake):
            d.mkdir()
            (d / "counter_1.db").write_bytes(b"x")
        server._remove_orphaned_dirs()
        made = server._metrics_dir()
        assert made is not None and os.path.isdir(made)
        assert os.path.basename(made).startswith(f"orbit-metrics-{os.getpid()}-")
        assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == made
        assert not orphan.exists() and not orphan_wake.exists()
        assert running.exists() and unnamed.exists() and running_wake.exists()
    finally:
        live.kill()
        live.wait()
