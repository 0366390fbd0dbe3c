"""Wakeups: a submission's commit starts the long polls waiting on its queue at once.

A waiting claim otherwise learns of new work at its next probe (``longpoll.poll``: every
20-50 ms). Here each waiting poll registers the public ids of its session's queues; after a
submission commits, the route calls :meth:`Wakeups.notify` with the queue of each task it
created, which wakes as many polls of that queue in this process as tasks arrived there. What
this process could not wake goes to the server's other worker processes as one datagram each
(a Unix socket per process in a directory the server makes for the run), and each wakes up
to that many of its own. A woken poll claims at once. Each process also keeps how many polls
it has waiting in a shared board (a small file every process maps), and a sender skips a
sibling whose board entry says none: a submission then costs no send, and no sibling a wakeup
to read, where nothing waits.

It is a hint, never the only way: a wakeup dropped (a full socket buffer, a process starting,
a poll registered a moment late, another server's submission) leaves the poll to its next
probe, so a task is started as it would be without wakeups, only later.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import mmap
import os
import socket
import struct
import threading
import time
from collections.abc import Iterable, Iterator

log = logging.getLogger("orbit.wakeups")

SIBLINGS_TTL = 1.0  # seconds the list of sibling processes' sockets is reused
DATAGRAM = 8192  # bytes one datagram of queue ids may take
# The board: an entry (polls waiting, pid) per pid modulo SLOTS. An entry is trusted only when
# it names the sibling's own pid, so two processes on one entry make their senders send.
SLOTS = 4096
ENTRY = struct.Struct("<ii")


class Waiter:
    """One poll's registration: ``wait(seconds)`` returns True when woken meanwhile."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def wait(self, seconds: float) -> bool:
        woken = self.event.wait(seconds)
        self.event.clear()
        return woken


class Wakeups:
    """The polls waiting in this process, by queue public id, and the way to the server's
    other processes. ``directory`` None: this process alone (an app served in-process)."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory
        self._waiting: dict[str, list[Waiter]] = {}
        self._lock = threading.Lock()
        self._pid: int | None = None  # the process whose socket is bound (forks rebind)
        self._sock: socket.socket | None = None  # bound: this process's receiving end
        self._out: socket.socket | None = None  # unbound, non-blocking: what it sends with
        self._siblings: list[str] = []
        self._siblings_at = float("-inf")
        self._board: mmap.mmap | None = None
        self._listening = 0  # polls waiting in this process

    @contextlib.contextmanager
    def listen(self, queues: Iterable[str]) -> Iterator[Waiter]:
        """Register a waiting poll for ``queues`` while the block runs."""
        self._bind()
        waiter, names = Waiter(), list(queues)
        with self._lock:
            for queue in names:
                self._waiting.setdefault(queue, []).append(waiter)
            self._post(+1)
        try:
            yield waiter
        finally:
            with self._lock:
                for queue in names:
                    waiters = self._waiting.get(queue, [])
                    if waiter in waiters:
                        waiters.remove(waiter)
                    if not waiters:
                        self._waiting.pop(queue, None)
                self._post(-1)

    def notify(self, arrived: dict[str, int]) -> None:
        """Tasks committed: queue public id -> how many. Wakes that many local polls of each
        queue (the longest waiting first) and sends what is left to the other processes."""
        left = self._wake(arrived)
        if left and self.directory:
            self._send(left)

    def _wake(self, arrived: dict[str, int]) -> dict[str, int]:
        left: dict[str, int] = {}
        with self._lock:
            for queue, count in arrived.items():
                waiters = self._waiting.get(queue, [])
                asleep = [w for w in waiters if not w.event.is_set()]
                for waiter in asleep[:count]:
                    waiter.event.set()
                if count > len(asleep):
                    left[queue] = count - len(asleep)
        return left

    # Between the server's processes ----------------------------------------------------------
    def _post(self, change: int) -> None:
        """Count a poll in or out on this process's board entry (the caller holds the lock)."""
        self._listening += change
        if self._board is not None:
            ENTRY.pack_into(
                self._board, os.getpid() % SLOTS * ENTRY.size, self._listening, os.getpid()
            )

    def _waits(self, pid: int) -> bool:
        """Whether the sibling ``pid`` may have a poll waiting: its board entry says so, or
        the entry is another process's (or there is no board)."""
        if self._board is None:
            return True
        count, owner = ENTRY.unpack_from(self._board, pid % SLOTS * ENTRY.size)
        return owner != pid or count > 0

    def _open_board(self) -> mmap.mmap | None:
        path = os.path.join(self.directory or "", "board")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size < SLOTS * ENTRY.size:
                    os.ftruncate(fd, SLOTS * ENTRY.size)  # zeros; every process asks the same
                return mmap.mmap(fd, SLOTS * ENTRY.size)
            finally:
                os.close(fd)
        except OSError as exc:  # senders then send to every sibling, as without a board
            log.warning("wakeups board off: %s", exc, extra={"action": "wakeups"})
            return None

    def _bind(self) -> None:
        if not self.directory or self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            path = os.path.join(self.directory, f"{os.getpid()}.sock")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                sock.bind(path)
            except OSError as exc:
                sock.close()
                self.directory = None  # wakeups stay within this process; probes do the rest
                log.warning("wakeups between processes off: %s", exc, extra={"action": "wakeups"})
                return
            # Sending never waits: a sibling whose queue is full (or one gone) misses a hint,
            # and a submission is never held up for it. Under gevent a blocking socket would
            # wait for room, and two greenlets sending at once would collide on it.
            out = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            out.setblocking(False)
            self._sock, self._out, self._pid = sock, out, os.getpid()
            self._board = self._open_board()
            self._post(0)
        threading.Thread(target=self._receive, name="orbit-wakeups", daemon=True).start()

    def _receive(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                data = sock.recv(DATAGRAM)
            except OSError:
                return
            arrived: dict[str, int] = {}
            for part in data.decode("ascii", "replace").split(","):
                queue, _, count = part.partition(":")
                if queue and count.isdigit():
                    arrived[queue] = arrived.get(queue, 0) + int(count)
            self._wake(arrived)

    def _send(self, left: dict[str, int]) -> None:
        self._bind()
        out = self._out
        if out is None:
            return
        data = ",".join(f"{q}:{n}" for q, n in left.items()).encode("ascii")[:DATAGRAM]
        for path in self._sibling_paths():
            pid = os.path.basename(path).removesuffix(".sock")
            if pid.isdigit() and not self._waits(int(pid)):
                continue  # nothing waits there: no send, and nothing for it to read
            try:
                out.sendto(data, path)
            except BlockingIOError:
                pass  # its queue is full: it is busy, and its polls probe
            except OSError:
                self._siblings_at = float("-inf")  # gone: look again next time

    def _sibling_paths(self) -> list[str]:
        if time.monotonic() - self._siblings_at > SIBLINGS_TTL:
            own = f"{os.getpid()}.sock"
            self._siblings = [
                p
                for p in glob.glob(os.path.join(self.directory or "", "*.sock"))
                if os.path.basename(p) != own
            ]
            self._siblings_at = time.monotonic()
        return self._siblings
