"""A TCP proxy on 127.0.0.1 that a test can cut, stall or point elsewhere: the network between the
service and its database, made to fail on purpose.

    with TcpProxy(target_port=5432) as proxy:
        url = f"postgresql://user:pw@127.0.0.1:{proxy.port}/db"
        proxy.cut()            # reset every open connection (new ones still pass)
        proxy.stall()          # hold every byte, both ways, and every new connection
        proxy.resume()
        proxy.target_port = 5433  # the server moved: new connections go there
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import TracebackType

#: bytes read at once from either side
CHUNK = 65536


class TcpProxy:
    """Forwards each accepted connection to ``127.0.0.1:target_port``, a thread per direction.

    :param target_port: where connections go (settable: later connections follow it).
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._accepting = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)

    def __enter__(self) -> TcpProxy:
        self._accepting.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def connections(self) -> int:
        """Connections open through the proxy (two sockets each)."""
        with self._lock:
            return len(self._open) // 2

    def cut(self) -> int:
        """Reset every open connection, as a broken network does; how many were cut."""
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _reset(sock)
        return len(sockets) // 2

    def stall(self) -> None:
        """Hold every byte in flight and every new connection until :meth:`resume`."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread; close alone does not
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self._flowing.wait()
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        except OSError:
            _reset(client)  # the server is down: refused, as it would be without the proxy
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(CHUNK):
                self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                gone = [s for s in (source, sink) if s in self._open]
                self._open.difference_update(gone)
            for sock in gone:
                _reset(sock)


def _reset(sock: socket.socket) -> None:
    """Close with a reset (RST), not a polite FIN: the peer sees the connection broken.

    A socket another thread is blocked reading stays open after ``close`` (the read holds it) and
    never answers its peer again, so the read is woken first: ``SHUT_RD`` sends nothing, and the
    last close then resets.
    """
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()
