"""Following who holds a lock: GET /locks/{name}?watch=true, an event
stream that anyone may read (no token). Client.watch makes a Watch."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from types import TracebackType
from typing import TYPE_CHECKING, Dict, Generator, Iterator, Optional, Tuple, Type

from .errors import Overloaded, Unavailable, Unreachable
from .models import Change
from .sse import read_events

if TYPE_CHECKING:
    from .client import Client

#: The pause before a reconnect until the stream's ``retry:`` says otherwise
#: (the sidecar sends 1000 ms).
DEFAULT_RETRY = 1.0

_Stream = Tuple[http.client.HTTPConnection, http.client.HTTPResponse, socket.socket]


class Watch:
    """The changes of one lock, as an iterator of Change; a context manager.

    The first change is a ``state``. A stream that breaks (the sidecar
    restarting, a proxy cutting it) is reconnected after the stream's
    retry delay, sending the Last-Event-ID of the last event seen; an
    ``unavailable`` change is yielded at once, since the holder is unknown
    until the ``state`` the sidecar sends on the new stream. While the
    sidecar cannot be reached, is unavailable or overloaded, it keeps
    trying; errors that trying again cannot mend (a bad name, a refused
    API token) are raised, the first one by Client.watch itself.
    close(), from any thread, ends the iteration.
    """

    def __init__(self, client: "Client", name: str, path: str) -> None:
        self.name = name
        self._client = client
        self._path = path
        self._mu = threading.Lock()  # orders close() with a new stream
        self._closed = threading.Event()
        self._last_id: Optional[str] = None
        self._retry = DEFAULT_RETRY
        self._stream: Optional[_Stream] = self._open()

    def __iter__(self) -> Iterator[Change]:
        return self._changes()

    def close(self) -> None:
        """End the iteration and the stream (once; later calls do nothing)."""
        with self._mu:
            self._closed.set()
            stream = self._stream
        if stream is not None:
            wake(stream)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def _open(self) -> _Stream:
        headers: Dict[str, str] = {"Last-Event-ID": self._last_id} if self._last_id is not None else {}
        conn, res, sock = self._client._open_stream(self._path, {"watch": "true"}, headers, self._client.timeout)
        sock.settimeout(None)  # a lock nobody touches leaves the stream silent for as long
        return conn, res, sock

    def _changes(self) -> Iterator[Change]:
        stream = self._stream
        while stream is not None:
            why = yield from self._follow(stream)
            if self._closed.is_set():
                return
            yield Change("unavailable", self.name, None, detail=f"the watch stream broke ({why}); reconnecting")
            stream = self._reconnect()

    def _follow(self, stream: _Stream) -> Generator[Change, None, str]:
        """Yield the changes of one stream; return why it ended."""
        _, res, _ = stream
        try:
            for event in read_events(res.readline, self._set_retry):
                if event.id is not None:
                    self._last_id = event.id
                yield Change.from_event(event.event, json.loads(event.data))
            return "it ended"
        except (OSError, ValueError, KeyError, http.client.HTTPException) as e:
            return str(e) or type(e).__name__
        finally:
            close(stream)

    def _reconnect(self) -> Optional[_Stream]:
        """The next stream, after the retry delay; None once closed."""
        delay = self._retry
        while not self._closed.wait(delay):
            delay = self._retry
            try:
                stream = self._open()
            except (Unreachable, Unavailable, Overloaded) as e:
                delay = max(delay, e.retry_after or 0.0)  # restarting, or busy: try again
                continue
            with self._mu:
                if not self._closed.is_set():
                    self._stream = stream
                    return stream
            close(stream)
        return None

    def _set_retry(self, ms: int) -> None:
        self._retry = ms / 1000


def wake(stream: _Stream) -> None:
    """Ends the connection under a reader blocked on it."""
    try:
        stream[2].shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def close(stream: _Stream) -> None:
    conn, res, sock = stream
    wake(stream)
    res.close()
    conn.close()
    sock.close()
