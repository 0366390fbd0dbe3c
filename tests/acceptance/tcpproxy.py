"""TCP stand-ins for a database server that stops answering: a relay that can freeze (every
connection stays open and nothing passes either way, as with a hung primary or a dropped
network path), and a host that accepts connections and never speaks."""

from __future__ import annotations

import socket
import threading


class FreezingRelay:
    """Relays 127.0.0.1:<port> to ``upstream``; while ``frozen`` is set nothing is passed on,
    in either direction, on old connections or new ones."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frozen = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._closed = False
        self._sockets: list[socket.socket] = []

    def __enter__(self) -> FreezingRelay:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True
        self.frozen.clear()
        for s in [self.listener, *self._sockets]:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                while self.frozen.is_set() and not self._closed:
                    threading.Event().wait(0.05)  # held until thawed
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class SilentHost:
    """A listening port whose connections the kernel completes and nobody ever answers."""

    def __enter__(self) -> SilentHost:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.listener.getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        self.listener.close()
