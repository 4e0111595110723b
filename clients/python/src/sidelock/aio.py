"""The asyncio client: AsyncClient, beside the blocking Client.

The same calls, awaited, with the same errors and models. Requests reuse
kept-alive connections (AsyncPool), and a kept lock is an asyncio task
(heartbeats, or the reader of its held stream) that ``async with`` ends:

    async with AsyncClient() as client:
        async with client.lock("orders/42", ttl="30s") as lock:
            ...  # act while lock.valid(); pass lock.fence along

Standard library only, like the blocking client.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Generator, List, Optional, Tuple, Type

from .client import (Base, Names, acquire_query, lock_path, lockset_path, problem_error, rwlock_path,
                     semaphore_path)
from .errors import LeaseGone, LockHeld, Overloaded, SidelockError, Unavailable, Unreachable
from .keep import Beats, LeaseView, expiry_reason, first_lease, held_event, seconds_left
from .models import Change, Lease, LockSetStatus, Mode, RWLockStatus, SemaphoreStatus, Status
from .sse import Event, EventParser
from .times import Duration, go_duration, seconds
from .transport import MAX_IDLE, replayable
from .watch import DEFAULT_RETRY

#: The longest status line or header line read (the sidecar's are short).
MAX_LINE = 64 * 1024

# HTTP/1.1 over asyncio streams --------------------------------------------


class _Connection:
    """One connection: its streams, and whether it may carry another request."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def dropped(self) -> bool:
        """Closed by the sidecar while it sat idle (or sent what nobody asked for)."""
        return self.writer.is_closing() or self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()


class _Answer:
    """An answer's status and headers; its body is read with read_body or
    line by line with readline (an event stream)."""

    def __init__(self, conn: _Connection, status: int, headers: Dict[str, str], head_only: bool) -> None:
        self.conn, self.status, self.headers = conn, status, headers
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left: Optional[int] = 0 if head_only else (int(length) if length is not None and not self._chunked else None)
        self._buffer = b""
        self._done = self._left == 0

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry the next request once the body is read."""
        return self._done and (self._chunked or self._left == 0) and \
            self.headers.get("connection", "").lower() != "close"

    async def read_body(self) -> bytes:
        parts = [self._buffer]
        self._buffer = b""
        while not self._done:
            parts.append(await self._next())
        return b"".join(parts)

    async def readline(self) -> bytes:
        """The next line of the body, with its newline; b"" at its end."""
        while b"\n" not in self._buffer and not self._done:
            self._buffer += await self._next()
        line, sep, rest = self._buffer.partition(b"\n")
        self._buffer = rest
        return line + sep

    async def _next(self) -> bytes:
        reader = self.conn.reader
        if self._chunked:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                self._done = True
                return b""
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            return data
        if self._left is None:  # until the connection ends
            data = await reader.read(65536)
            self._done = not data
            return data
        data = await reader.read(min(self._left, 65536))
        if not data:
            raise asyncio.IncompleteReadError(data, self._left)
        self._left -= len(data)
        self._done = self._left == 0
        return data


class AsyncPool:
    """Kept-alive connections to one sidecar, for one event loop: one
    request after another reuses one connection; overlapping ones each get
    their own, and at most MAX_IDLE stay open between calls."""

    def __init__(self, scheme: str, host: str, port: Optional[int]) -> None:
        self._host, self._https = host, scheme == "https"
        self._port = port or (443 if self._https else 80)
        self._idle: List[_Connection] = []

    async def request(self, method: str, target: str, headers: Dict[str, str], timeout: float) -> Tuple[int, bytes]:
        """Send one request and read its whole answer: (status, body)."""
        return await asyncio.wait_for(self._request(method, target, headers), timeout)

    async def open(self, method: str, target: str, headers: Dict[str, str], timeout: float) -> _Answer:
        """A request on a connection of its own (an event stream): its
        answer's head, the body left to read. The caller closes answer.conn."""
        conn = await asyncio.wait_for(self._connect(), timeout)
        try:
            return await asyncio.wait_for(self._exchange(conn, method, target, headers), timeout)
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def _request(self, method: str, target: str, headers: Dict[str, str]) -> Tuple[int, bytes]:
        conn, reused = await self._take()
        try:
            try:
                answer = await self._exchange(conn, method, target, headers)
                body = await answer.read_body()
            except (ConnectionError, asyncio.IncompleteReadError):
                if not (reused and replayable(method, headers)):
                    raise
                conn.close()  # closed by the sidecar just as it was taken: once more on a new one
                conn = await self._connect()
                answer = await self._exchange(conn, method, target, headers)
                body = await answer.read_body()
        except BaseException:
            conn.close()
            raise
        if answer.reusable and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()
        return answer.status, body

    async def _take(self) -> Tuple[_Connection, bool]:
        while self._idle:
            conn = self._idle.pop()
            if not conn.dropped():
                return conn, True
            conn.close()
        return await self._connect(), False

    async def _connect(self) -> _Connection:
        context = ssl.create_default_context() if self._https else None
        reader, writer = await asyncio.open_connection(self._host, self._port, ssl=context, limit=MAX_LINE)
        return _Connection(reader, writer)

    async def _exchange(self, conn: _Connection, method: str, target: str, headers: Dict[str, str]) -> _Answer:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host}:{self._port}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if method in ("POST", "PUT"):
            lines.append("Content-Length: 0")
        conn.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await conn.writer.drain()
        status_line = await conn.reader.readline()
        if not status_line:
            raise ConnectionResetError("the connection closed before an answer")
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ConnectionError(f"not an HTTP answer: {status_line[:80]!r}")
        answer_headers: Dict[str, str] = {}
        while True:
            line = (await conn.reader.readline()).decode("latin-1").rstrip("\r\n")
            if not line:
                break
            name, _, value = line.partition(":")
            answer_headers[name.strip().lower()] = value.strip()
        status = int(parts[1])
        return _Answer(conn, status, answer_headers, head_only=status in (204, 304) or method == "HEAD")


# The client ----------------------------------------------------------------


class AsyncClient(Base):
    """A client of one sidecar for asyncio; use it from one event loop.

    The calls of the blocking Client, awaited, with the same arguments,
    errors and models: ``base_url`` defaults to $SIDELOCK_ADDR, else
    http://127.0.0.1:7420; ``api_token`` to $SIDELOCK_API_TOKEN;
    ``timeout`` bounds each request (seconds) on top of its ``wait``.
    ``async with AsyncClient() as client`` (or ``await client.aclose()``)
    closes its kept-alive connections.
    """

    def __init__(self, base_url: Optional[str] = None, *, api_token: Optional[str] = None,
                 timeout: float = 10.0) -> None:
        super().__init__(base_url, api_token=api_token, timeout=timeout)
        self._pool = AsyncPool(self._url.scheme, self._url.hostname or "", self._url.port)

    async def aclose(self) -> None:
        """Close the kept-alive connections; the client may still be used."""
        self._pool.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.aclose()

    # One request each; each is its Client counterpart.

    async def acquire(self, name: str, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
                      owner: Optional[str] = None, max_hold: Optional[Duration] = None,
                      idempotency_key: Optional[str] = None) -> Lease:
        """Take the lock, waiting up to ``wait``; raises LockHeld when it is still held."""
        return await self._acquire(lock_path(name), acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold),
                                   wait, idempotency_key)

    async def extend(self, name: str, token: str, *, ttl: Optional[Duration] = None,
                     timeout: Optional[float] = None) -> Lease:
        """The heartbeat; raises LeaseGone once the token no longer holds the lock."""
        return await self._extend(lock_path(name), token, ttl=ttl, timeout=timeout)

    async def release(self, name: str, token: str) -> None:
        """Give the lock up; raises LeaseGone if the token no longer held it."""
        await self._release(lock_path(name), token)

    async def inspect(self, name: str) -> Status:
        """Who holds the lock now, read from the masters."""
        return Status.from_json(await self._read(lock_path(name), {}))

    async def acquire_semaphore(self, name: str, permits: int, *, ttl: Optional[Duration] = None,
                                wait: Optional[Duration] = None, owner: Optional[str] = None,
                                max_hold: Optional[Duration] = None, idempotency_key: Optional[str] = None) -> Lease:
        """Take one of the semaphore's ``permits``; raises LockHeld when all are still held."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold, permits=permits)
        return await self._acquire(semaphore_path(name), query, wait, idempotency_key)

    async def extend_semaphore(self, name: str, token: str, *, ttl: Optional[Duration] = None,
                               timeout: Optional[float] = None) -> Lease:
        return await self._extend(semaphore_path(name), token, ttl=ttl, timeout=timeout)

    async def release_semaphore(self, name: str, token: str) -> None:
        await self._release(semaphore_path(name), token)

    async def inspect_semaphore(self, name: str, permits: int) -> SemaphoreStatus:
        return SemaphoreStatus.from_json(await self._read(semaphore_path(name), {"permits": str(permits)}))

    async def acquire_rwlock(self, name: str, mode: Mode, *, ttl: Optional[Duration] = None,
                             wait: Optional[Duration] = None, owner: Optional[str] = None,
                             max_hold: Optional[Duration] = None, idempotency_key: Optional[str] = None) -> Lease:
        """Read ("shared") or write ("exclusive") the lock; raises LockHeld when the other side still holds it."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold, mode=mode)
        return await self._acquire(rwlock_path(name), query, wait, idempotency_key)

    async def extend_rwlock(self, name: str, token: str, *, ttl: Optional[Duration] = None,
                            timeout: Optional[float] = None) -> Lease:
        return await self._extend(rwlock_path(name), token, ttl=ttl, timeout=timeout)

    async def release_rwlock(self, name: str, token: str) -> None:
        await self._release(rwlock_path(name), token)

    async def inspect_rwlock(self, name: str) -> RWLockStatus:
        return RWLockStatus.from_json(await self._read(rwlock_path(name), {}))

    async def acquire_lockset(self, names: Names, *, ttl: Optional[Duration] = None,
                              wait: Optional[Duration] = None, owner: Optional[str] = None,
                              max_hold: Optional[Duration] = None, idempotency_key: Optional[str] = None) -> Lease:
        """Take every lock of the set, all or nothing; raises LockHeld or SetChanged (none is held then)."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold)
        return await self._acquire(lockset_path(names), query, wait, idempotency_key)

    async def extend_lockset(self, names: Names, token: str, *, ttl: Optional[Duration] = None,
                             timeout: Optional[float] = None) -> Lease:
        return await self._extend(lockset_path(names), token, ttl=ttl, timeout=timeout)

    async def release_lockset(self, names: Names, token: str) -> None:
        await self._release(lockset_path(names), token)

    async def inspect_lockset(self, names: Names) -> LockSetStatus:
        return LockSetStatus.from_json(await self._read(lockset_path(names), {}))

    # Kept alive until released: ``async with client.lock(...) as lock``,
    # or ``lock = await client.lock(...)`` and ``await lock.release()``.

    def lock(self, name: str, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
             owner: Optional[str] = None, max_hold: Optional[Duration] = None, hold: bool = False,
             on_lost: Optional[Callable[[str], None]] = None) -> "Acquiring":
        """Acquire ``name`` and keep it until released, as Client.lock: by a
        heartbeat task, or held over an event stream with ``hold=True``."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold)
        return Acquiring(self._keep(lock_path(name), query, wait, hold, on_lost))

    def semaphore(self, name: str, permits: int, *, ttl: Optional[Duration] = None,
                  wait: Optional[Duration] = None, owner: Optional[str] = None, max_hold: Optional[Duration] = None,
                  hold: bool = False, on_lost: Optional[Callable[[str], None]] = None) -> "Acquiring":
        """One of the semaphore's ``permits``, kept as lock() keeps a lock."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold, permits=permits)
        return Acquiring(self._keep(semaphore_path(name), query, wait, hold, on_lost))

    def rwlock(self, name: str, mode: Mode, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
               owner: Optional[str] = None, max_hold: Optional[Duration] = None, hold: bool = False,
               on_lost: Optional[Callable[[str], None]] = None) -> "Acquiring":
        """A read or the write of the lock, kept as lock() keeps a lock."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold, mode=mode)
        return Acquiring(self._keep(rwlock_path(name), query, wait, hold, on_lost))

    def lockset(self, names: Names, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
                owner: Optional[str] = None, max_hold: Optional[Duration] = None, hold: bool = False,
                on_lost: Optional[Callable[[str], None]] = None) -> "Acquiring":
        """Every lock of the set, kept as lock() keeps a lock; lost whole when one ends."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold)
        return Acquiring(self._keep(lockset_path(names), query, wait, hold, on_lost))

    # Watching and leader election.

    def watch(self, name: str) -> "AsyncWatch":
        """Follow who holds ``name``: ``async with client.watch(name) as
        watch: async for change in watch`` (a ``state`` first); reconnects
        a broken stream as Client.watch does."""
        return AsyncWatch(self, name, lock_path(name))

    async def campaign(self, name: str, *, owner: str, wait: Duration = "10s", ttl: Optional[Duration] = None,
                       max_hold: Optional[Duration] = None, on_lost: Optional[Callable[[str], None]] = None,
                       stop: Optional[asyncio.Event] = None) -> "AsyncKeptLock":
        """Run for leader until elected, as Client.campaign; the term is a
        held lock. Cancelling the task, or setting ``stop``, ends it."""
        if seconds(wait) <= 0:
            raise ValueError("a campaign waits in the queue: wait must be positive")
        while True:
            try:
                return await self.lock(name, hold=True, wait=wait, owner=owner, ttl=ttl, max_hold=max_hold,
                                       on_lost=on_lost)
            except LockHeld:
                if stop is not None and stop.is_set():
                    raise

    async def leader(self, name: str) -> Optional[str]:
        """Who leads ``name`` now (its lock's owner), or None."""
        status = await self.inspect(name)
        return status.owner if status.held else None

    # The calls above, by URL path.

    async def _acquire(self, path: str, query: Dict[str, str], wait: Optional[Duration],
                       idempotency_key: Optional[str]) -> Lease:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return Lease.from_json(await self._call("POST", path, query, headers, self._wait_budget(wait)))

    async def _extend(self, path: str, token: str, *, ttl: Optional[Duration] = None,
                      timeout: Optional[float] = None) -> Lease:
        query = {"ttl": go_duration(ttl)} if ttl is not None else {}
        return Lease.from_json(await self._call("PUT", path, query, {"Lock-Token": token}, timeout))

    async def _release(self, path: str, token: str) -> None:
        await self._call("DELETE", path, {}, {"Lock-Token": token})

    async def _read(self, path: str, query: Dict[str, str]) -> Any:
        return await self._call("GET", path, query, {})

    async def _keep(self, path: str, query: Dict[str, str], wait: Optional[Duration], hold: bool,
                    on_lost: Optional[Callable[[str], None]]) -> "AsyncKeptLock":
        if hold:
            return await AsyncHeldLock.open(self, path, {**query, "hold": "true"}, self._wait_budget(wait), on_lost)
        return AsyncHeartbeatLock(self, path, await self._acquire(path, query, wait, None), on_lost)

    async def _call(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str],
                    timeout: Optional[float] = None) -> Any:
        """One request; the decoded JSON answer (None for none). A non-2xx
        answer raises its typed error."""
        try:
            status, body = await self._pool.request(method, self._target(path, query), self._headers(headers),
                                                    timeout if timeout is not None else self.timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            raise Unreachable("unreachable", 0, f"{method} {path}: {e or type(e).__name__}") from e
        if status >= 300:
            raise problem_error(status, body)
        return json.loads(body) if body else None

    async def _open_stream(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str],
                           timeout: float) -> _Answer:
        """A request answered with an event stream, left open for reading."""
        try:
            answer = await self._pool.open(method, self._target(path, query), self._headers(headers), timeout)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            raise Unreachable("unreachable", 0, f"{method} {path}: {e or type(e).__name__}") from e
        try:
            if answer.status >= 300:
                raise problem_error(answer.status, await asyncio.wait_for(answer.read_body(), timeout))
            if answer.status != 200 or not answer.headers.get("content-type", "").startswith("text/event-stream"):
                raise Unreachable("unexpected_answer", answer.status, f"{method} {path}: not an event stream")
        except BaseException:
            answer.conn.close()
            raise
        return answer


class Acquiring(Awaitable["AsyncKeptLock"]):
    """A kept lock on its way: await it for the lock, or ``async with`` it
    to release the lock at the block's end."""

    def __init__(self, pending: Awaitable["AsyncKeptLock"]) -> None:
        self._pending = pending
        self._lock: Optional[AsyncKeptLock] = None

    def __await__(self) -> Generator[Any, None, "AsyncKeptLock"]:
        return self._pending.__await__()

    async def __aenter__(self) -> "AsyncKeptLock":
        self._lock = await self._pending
        return self._lock

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        if self._lock is not None:
            await self._lock.release()


# Kept locks ----------------------------------------------------------------


class AsyncKeptLock(LeaseView):
    """A lock kept alive by a task until released: as KeptLock, with
    ``lost`` an asyncio.Event and ``release()`` and ``extend()`` awaited."""

    def __init__(self, client: AsyncClient, path: str, lease: Lease,
                 on_lost: Optional[Callable[[str], None]]) -> None:
        self._client, self._path, self._lease, self._on_lost = client, path, lease, on_lost
        self._released = False
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None

    @property
    def lease(self) -> Lease:
        return self._lease

    def _ended(self) -> bool:
        return self.lost.is_set() or self._released

    async def release(self) -> None:
        """Give the lock up (once; later calls do nothing)."""
        raise NotImplementedError

    async def extend(self, ttl: Optional[Duration] = None) -> Lease:
        """Push the lease out now (with a new ``ttl`` when given); raises
        LeaseGone, and marks the lock lost, once the token no longer holds it."""
        try:
            self._lease = await self._client._extend(self._path, self.token, ttl=ttl)
        except LeaseGone:
            self._mark_lost("lease_gone")
            raise
        return self._lease

    def _mark_lost(self, reason: str) -> None:
        if self.lost.is_set() or self._released:
            return
        self.lost_reason = reason
        self.lost.set()
        if self._on_lost is not None:
            self._on_lost(reason)

    async def __aenter__(self) -> "AsyncKeptLock":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.release()


class AsyncHeartbeatLock(AsyncKeptLock):
    """A lease extended by a task, on the blocking HeartbeatLock's schedule."""

    def __init__(self, client: AsyncClient, path: str, lease: Lease,
                 on_lost: Optional[Callable[[str], None]]) -> None:
        super().__init__(client, path, lease, on_lost)
        self._task = asyncio.ensure_future(self._beat())

    async def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        try:
            await self._client._release(self._path, self.token)
        except LeaseGone:
            pass  # it had ended already: nothing to give up

    async def _beat(self) -> None:
        beats = Beats(self._lease)
        while await _pause(beats.pause) and (timeout := beats.due()) is not None:
            try:
                self._lease = await self._client._extend(self._path, self.token, timeout=timeout)
                beats.renewed(self._lease)
            except SidelockError as e:
                beats.lost = beats.failed(e)
                if beats.lost:
                    break
        self._mark_lost(beats.lost or "expired")


class AsyncHeldLock(AsyncKeptLock):
    """A lock held over an event stream, read by a task, as HeldLock."""

    @classmethod
    async def open(cls, client: AsyncClient, path: str, query: Dict[str, str], budget: float,
                   on_lost: Optional[Callable[[str], None]]) -> "AsyncHeldLock":
        answer = await client._open_stream("POST", path, query, {}, budget)
        parser = EventParser()
        try:
            lease = first_lease(await asyncio.wait_for(_next_event(answer, parser), budget))
        except (OSError, ValueError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            answer.conn.close()
            raise Unreachable("unreachable", 0, f"reading the held stream: {e or type(e).__name__}") from e
        except BaseException:
            answer.conn.close()
            raise
        return cls(client, path, lease, on_lost, answer, parser)

    def __init__(self, client: AsyncClient, path: str, lease: Lease, on_lost: Optional[Callable[[str], None]],
                 answer: _Answer, parser: EventParser) -> None:
        super().__init__(client, path, lease, on_lost)
        self._answer, self._parser = answer, parser
        self._task = asyncio.ensure_future(self._read())

    async def release(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            await self._client._release(self._path, self.token)  # frees it now; closing would too, a moment later
        except SidelockError:
            pass  # already ended, or the sidecar unreachable: closing the stream releases
        finally:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _read(self) -> None:
        try:
            while True:
                event = await asyncio.wait_for(_next_event(self._answer, self._parser),
                                               max(seconds_left(self._lease), 0.001))
                if event is None:
                    self._mark_lost("disconnected")
                    return
                self._lease, lost = held_event(self._lease, event)
                if lost is not None:
                    self._mark_lost(lost)
                    return
        except asyncio.TimeoutError:
            self._mark_lost(expiry_reason(self._lease))
        except (OSError, ValueError, KeyError, asyncio.IncompleteReadError):
            self._mark_lost("disconnected")
        finally:
            self._answer.conn.close()


async def _pause(seconds: float) -> bool:
    """Sleeps, then True: a loop's condition that waits first."""
    await asyncio.sleep(seconds)
    return True


async def _next_event(answer: _Answer, parser: EventParser) -> Optional[Event]:
    """The stream's next event; None at its end."""
    while True:
        line = await answer.readline()
        if not line:
            return None
        event = parser.feed(line)
        if event is not None:
            return event


class AsyncWatch:
    """The changes of one lock, as Watch: ``async for change in watch``;
    a broken stream is reconnected (an ``unavailable`` change, then the
    ``state`` again); ``await watch.aclose()`` or ``async with`` ends it.
    The first stream opens on entering the ``async with`` block (or the
    first iteration): errors that trying again cannot mend are raised there."""

    def __init__(self, client: AsyncClient, name: str, path: str) -> None:
        self.name, self._client, self._path = name, client, path
        self._last_id: Optional[str] = None
        self._retry = DEFAULT_RETRY
        self._closed = False
        self._answer: Optional[_Answer] = None

    async def _start(self) -> None:
        if self._answer is None and not self._closed:
            self._answer = await self._open()

    def __aiter__(self) -> AsyncIterator[Change]:
        return self._changes()

    async def aclose(self) -> None:
        """End the iteration and the stream."""
        self._closed = True
        if self._answer is not None:
            self._answer.conn.close()

    async def __aenter__(self) -> "AsyncWatch":
        await self._start()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.aclose()

    async def _open(self) -> _Answer:
        headers = {"Last-Event-ID": self._last_id} if self._last_id is not None else {}
        return await self._client._open_stream("GET", self._path, {"watch": "true"}, headers, self._client.timeout)

    async def _changes(self) -> AsyncIterator[Change]:
        await self._start()
        while self._answer is not None and not self._closed:
            answer, why = self._answer, "it ended"
            parser = EventParser(self._set_retry)
            try:
                while (event := await _next_event(answer, parser)) is not None:
                    if event.id is not None:
                        self._last_id = event.id
                    yield Change.from_event(event.event, json.loads(event.data))
            except (OSError, ValueError, KeyError, asyncio.IncompleteReadError) as e:
                why = str(e) or type(e).__name__
            finally:
                answer.conn.close()
            if self._closed:
                return
            yield Change("unavailable", self.name, None, detail=f"the watch stream broke ({why}); reconnecting")
            self._answer = await self._reconnect()

    async def _reconnect(self) -> Optional[_Answer]:
        delay = self._retry
        while not self._closed:
            await asyncio.sleep(delay)
            delay = self._retry
            try:
                return await self._open()
            except (Unreachable, Unavailable, Overloaded) as e:
                delay = max(delay, e.retry_after or 0.0)  # restarting, or busy: try again
        return None

    def _set_retry(self, ms: int) -> None:
        self._retry = ms / 1000
