"""HTTP to the sidecar, blocking: a small pool of kept-alive connections.

One request after another reuses one connection (no TCP handshake per
call); calls that overlap (a heartbeat thread beside an acquire that waits)
each get one of their own, and at most MAX_IDLE stay open between calls.
Event streams (a held lock, a watch) get a connection of their own that is
never pooled.
"""

from __future__ import annotations

import http.client
import select
import threading
import urllib.parse
from typing import Dict, List, Tuple

#: How many idle connections a client keeps for its next calls.
MAX_IDLE = 4

#: What a connection the sidecar closed while it sat idle raises on reuse.
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


def replayable(method: str, headers: Dict[str, str]) -> bool:
    """Whether a request may be sent again on a fresh connection after a
    kept-alive one turned out closed: reads, heartbeats and releases, and
    an acquire with an Idempotency-Key (net/http's rule too)."""
    return method in ("GET", "PUT", "DELETE") or "Idempotency-Key" in headers


class ConnectionPool:
    """Kept-alive connections to one sidecar; safe to share between threads."""

    def __init__(self, url: urllib.parse.SplitResult) -> None:
        self._url = url
        self._mu = threading.Lock()
        self._idle: List[http.client.HTTPConnection] = []

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        """A new connection of its own (for an event stream), not pooled."""
        cls = http.client.HTTPSConnection if self._url.scheme == "https" else http.client.HTTPConnection
        return cls(self._url.hostname or "", self._url.port, timeout=timeout)

    def request(self, method: str, target: str, headers: Dict[str, str], timeout: float) -> Tuple[int, bytes]:
        """Send one request and read its whole answer: (status, body).
        Raises OSError or http.client.HTTPException when it fails."""
        conn, reused = self._take(timeout)
        try:
            try:
                status, body, keep = exchange(conn, method, target, headers)
            except STALE:
                if not (reused and replayable(method, headers)):
                    raise
                conn.close()  # closed by the sidecar just as it was taken: once more on a new one
                conn = self.connect(timeout)
                status, body, keep = exchange(conn, method, target, headers)
        except BaseException:
            conn.close()
            raise
        if keep:
            self._put(conn)
        else:
            conn.close()
        return status, body

    def close(self) -> None:
        """Close the idle connections (calls in flight close theirs after)."""
        with self._mu:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self, timeout: float) -> Tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._mu:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self.connect(timeout), False
            if conn.sock is None or dropped(conn.sock):
                conn.close()  # the sidecar closed it while it sat idle
                continue
            conn.timeout = timeout
            conn.sock.settimeout(timeout)
            return conn, True

    def _put(self, conn: http.client.HTTPConnection) -> None:
        with self._mu:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()


def exchange(conn: http.client.HTTPConnection, method: str, target: str,
             headers: Dict[str, str]) -> Tuple[int, bytes, bool]:
    """One request on conn: (status, body, whether conn may be reused)."""
    conn.request(method, target, headers=headers)
    res = conn.getresponse()
    body = res.read()
    return res.status, body, not res.will_close


def dropped(sock: object) -> bool:
    """An idle connection that is readable was closed by the peer (or
    sent what nobody asked for): either way it cannot carry a request."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
