"""The client of a sidelock sidecar's lock API (docs/api.md)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import urllib.parse
from types import TracebackType
from typing import Callable, Dict, Iterable, Optional, Tuple, Type, Union

from .errors import LockHeld, SidelockError, Unreachable, error_for
from .keep import HeartbeatLock, HeldLock, KeptLock
from .models import Lease, LockSetStatus, Mode, RWLockStatus, SemaphoreStatus, Status
from .times import Duration, go_duration, seconds
from .transport import ConnectionPool
from .watch import Watch

#: Where the sidecar's lock API listens in a pod.
DEFAULT_ADDR = "http://127.0.0.1:7420"


def lock_path(name: str) -> str:
    """The URL path of a lock: each '/'-separated segment escaped on its
    own, so '/' stays the separator and anything else that means something
    in a URL ('?', '#', '%') reaches the sidecar as part of the name, which
    refuses it, instead of naming another lock (as pkg/client does)."""
    return "/locks/" + escape_name(name)


def semaphore_path(name: str) -> str:
    """The URL path of a semaphore, its name escaped as a lock's is.
    Semaphores are a keyspace of their own: semaphore "x" is not lock "x"."""
    return "/semaphores/" + escape_name(name)


def rwlock_path(name: str) -> str:
    """The URL path of a read/write lock, its name escaped as a lock's is;
    a keyspace of its own too: read/write lock "x" is neither lock "x" nor
    semaphore "x"."""
    return "/rwlocks/" + escape_name(name)


#: A lock set's names: a sequence of lock names, or one string of them
#: joined by "," ("a,b"); any order.
Names = Union[str, Iterable[str]]


def lockset_path(names: Names) -> str:
    """The URL path of a lock set: each lock name escaped as lock_path
    escapes it, joined by "," (which lock names cannot contain). The
    sidecar takes them in its own canonical (sorted) order, so any order
    names the same set."""
    if isinstance(names, str):
        names = names.split(",")
    return "/locksets/" + ",".join(escape_name(name) for name in names)


def escape_name(name: str) -> str:
    """A lock's, semaphore's or read/write lock's name as URL path segments
    (see lock_path)."""
    return "/".join(urllib.parse.quote(s, safe="") for s in name.split("/"))


class Base:
    """What both clients share: where the sidecar is, its API token, the
    request timeout, and how a request is addressed."""

    def __init__(self, base_url: Optional[str] = None, *, api_token: Optional[str] = None,
                 timeout: float = 10.0) -> None:
        url = urllib.parse.urlsplit((base_url or os.environ.get("SIDELOCK_ADDR") or DEFAULT_ADDR).rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
        self._url = url
        self._api_token = api_token if api_token is not None else os.environ.get("SIDELOCK_API_TOKEN") or None
        self.timeout = timeout

    def _wait_budget(self, wait: Optional[Duration]) -> float:
        """The request timeout of an acquire that may wait."""
        return self.timeout + (seconds(wait) if wait is not None else 0.0)

    def _target(self, path: str, query: Dict[str, str]) -> str:
        target = self._url.path + path
        return target + "?" + urllib.parse.urlencode(query) if query else target

    def _headers(self, extra: Dict[str, str]) -> Dict[str, str]:
        headers = dict(extra)
        if self._api_token:
            headers["Authorization"] = "Bearer " + self._api_token
        return headers


class Client(Base):
    """A client of one sidecar; blocking, safe to share between threads.

    ``base_url`` defaults to $SIDELOCK_ADDR, else http://127.0.0.1:7420;
    ``api_token`` to $SIDELOCK_API_TOKEN (sent only when set). ``timeout``
    bounds each request, in seconds, on top of the ``wait`` it asks for.
    Requests reuse kept-alive connections (transport.py); close() (or
    leaving a ``with Client() as client`` block) closes the idle ones.
    """

    def __init__(self, base_url: Optional[str] = None, *, api_token: Optional[str] = None,
                 timeout: float = 10.0) -> None:
        super().__init__(base_url, api_token=api_token, timeout=timeout)
        self._pool = ConnectionPool(self._url)

    def close(self) -> None:
        """Close the kept-alive connections; the client may still be used."""
        self._pool.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    # The lock API, one request each.

    def acquire(self, name: str, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
                owner: Optional[str] = None, max_hold: Optional[Duration] = None,
                idempotency_key: Optional[str] = None) -> Lease:
        """Take the lock, waiting up to ``wait`` while another owner holds it.

        Raises LockHeld when it is still held after the wait. With an
        ``idempotency_key`` (a random UUID per logical operation), a retry
        whose first answer was lost gets the same lease back.
        """
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold)
        return self._acquire(lock_path(name), query, wait, idempotency_key)

    def extend(self, name: str, token: str, *, ttl: Optional[Duration] = None,
               timeout: Optional[float] = None) -> Lease:
        """The heartbeat: push the lease out (by ``ttl`` when given); the
        answer carries a fresh ``valid_until``. Raises LeaseGone once the
        token no longer holds the lock."""
        return self._extend(lock_path(name), token, ttl=ttl, timeout=timeout)

    def release(self, name: str, token: str) -> None:
        """Give the lock up. Raises LeaseGone if the token no longer held it."""
        self._release(lock_path(name), token)

    def inspect(self, name: str) -> Status:
        """Who holds the lock now, read from the masters."""
        _, body = self._call("GET", lock_path(name), {}, {})
        return Status.from_json(json.loads(body))

    # Semaphores: at most ``permits`` holders of a name at once. Each call
    # is its lock counterpart with permits, which every caller of the
    # semaphore must give alike (PermitsMismatch otherwise).

    def acquire_semaphore(self, name: str, permits: int, *, ttl: Optional[Duration] = None,
                          wait: Optional[Duration] = None, owner: Optional[str] = None,
                          max_hold: Optional[Duration] = None, idempotency_key: Optional[str] = None) -> Lease:
        """Take one of the semaphore's ``permits``, waiting up to ``wait``
        while all are held. The lease carries ``permits`` and ``slot``.
        Raises LockHeld when all are still held after the wait."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold, permits=permits)
        return self._acquire(semaphore_path(name), query, wait, idempotency_key)

    def extend_semaphore(self, name: str, token: str, *, ttl: Optional[Duration] = None,
                         timeout: Optional[float] = None) -> Lease:
        """The heartbeat of a permit, as extend is a lock's."""
        return self._extend(semaphore_path(name), token, ttl=ttl, timeout=timeout)

    def release_semaphore(self, name: str, token: str) -> None:
        """Give the permit up. Raises LeaseGone if the token no longer held it."""
        self._release(semaphore_path(name), token)

    def inspect_semaphore(self, name: str, permits: int) -> SemaphoreStatus:
        """Who holds the semaphore's permits now, read from the masters."""
        _, body = self._call("GET", semaphore_path(name), {"permits": str(permits)}, {})
        return SemaphoreStatus.from_json(json.loads(body))

    # Read/write locks: many readers ("shared") or one writer ("exclusive")
    # at once. Each call is its lock counterpart with the mode; extend and
    # release find the reader or the writer by its token alone.

    def acquire_rwlock(self, name: str, mode: Mode, *, ttl: Optional[Duration] = None,
                       wait: Optional[Duration] = None, owner: Optional[str] = None,
                       max_hold: Optional[Duration] = None, idempotency_key: Optional[str] = None) -> Lease:
        """Read (``mode="shared"``) or write (``"exclusive"``) the lock,
        waiting up to ``wait`` while the other side holds it: a writer
        holding or waiting, for a reader; readers or another writer, for a
        writer. Raises LockHeld when it is still held after the wait. The
        lease carries ``mode``; a reader's its ``slot``, a writer's a fence."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold, mode=mode)
        return self._acquire(rwlock_path(name), query, wait, idempotency_key)

    def extend_rwlock(self, name: str, token: str, *, ttl: Optional[Duration] = None,
                      timeout: Optional[float] = None) -> Lease:
        """The heartbeat of a reader or the writer, as extend is a lock's."""
        return self._extend(rwlock_path(name), token, ttl=ttl, timeout=timeout)

    def release_rwlock(self, name: str, token: str) -> None:
        """Give the read or the write up. Raises LeaseGone if the token no
        longer held it."""
        self._release(rwlock_path(name), token)

    def inspect_rwlock(self, name: str) -> RWLockStatus:
        """Who reads or writes the lock now, and whether a writer waits,
        read from the masters."""
        _, body = self._call("GET", rwlock_path(name), {}, {})
        return RWLockStatus.from_json(json.loads(body))

    # Lock sets: several locks taken all or nothing under one lease (one
    # token, one fence per lock), in the sidecar's canonical order, so that
    # sets that overlap cannot deadlock. Each call is its lock counterpart
    # with the set's names (a list, or "a,b"; any order).

    def acquire_lockset(self, names: Names, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
                        owner: Optional[str] = None, max_hold: Optional[Duration] = None,
                        idempotency_key: Optional[str] = None) -> Lease:
        """Take every lock of the set, waiting up to ``wait`` in all while
        any is held. Raises LockHeld when one is still held after the wait,
        SetChanged when one ended while the set was being taken; either
        way none is held. The lease is named by the set's canonical name,
        has no fence of its own and lists its ``locks``, each with its
        fence; it is valid until the earliest of theirs."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold)
        return self._acquire(lockset_path(names), query, wait, idempotency_key)

    def extend_lockset(self, names: Names, token: str, *, ttl: Optional[Duration] = None,
                       timeout: Optional[float] = None) -> Lease:
        """The heartbeat of the whole set, as extend is a lock's."""
        return self._extend(lockset_path(names), token, ttl=ttl, timeout=timeout)

    def release_lockset(self, names: Names, token: str) -> None:
        """Give every lock of the set up. Raises LeaseGone if the token no
        longer held it."""
        self._release(lockset_path(names), token)

    def inspect_lockset(self, names: Names) -> LockSetStatus:
        """Who holds each lock of the set now, read from the masters."""
        _, body = self._call("GET", lockset_path(names), {}, {})
        return LockSetStatus.from_json(json.loads(body))

    # Locks and permits kept alive for the caller (keep.py).

    def lock(self, name: str, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
             owner: Optional[str] = None, max_hold: Optional[Duration] = None, hold: bool = False,
             on_lost: Optional[Callable[[str], None]] = None) -> KeptLock:
        """Acquire ``name`` and keep it until released; use it with ``with``.

        By default a background thread heartbeats (extends) the lease at a
        third of the shorter of its ttl and its validity. With
        ``hold=True`` the lock is held over a server-sent events stream
        instead: no heartbeats, and the sidecar releases it the moment the
        connection closes, even if this process is killed.

        The lock may still be lost (quorum lost, max_hold reached, the
        sidecar stopping): then ``lost`` is set and ``on_lost(reason)`` is
        called once, from the keeper's thread. The lock is never taken
        again behind the caller's back. Leaving the ``with`` block (also by
        an exception) releases the lock.
        """
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold)
        return self._keep(lock_path(name), query, wait, hold, on_lost)

    def semaphore(self, name: str, permits: int, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
                  owner: Optional[str] = None, max_hold: Optional[Duration] = None, hold: bool = False,
                  on_lost: Optional[Callable[[str], None]] = None) -> KeptLock:
        """Take one of the semaphore's ``permits`` and keep it until
        released, exactly as lock() keeps a lock (heartbeats, or held with
        ``hold=True``); the kept permit has ``permits`` and ``slot``."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold, permits=permits)
        return self._keep(semaphore_path(name), query, wait, hold, on_lost)

    def rwlock(self, name: str, mode: Mode, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
               owner: Optional[str] = None, max_hold: Optional[Duration] = None, hold: bool = False,
               on_lost: Optional[Callable[[str], None]] = None) -> KeptLock:
        """Read (``"shared"``) or write (``"exclusive"``) the lock and keep
        it until released, exactly as lock() keeps a lock (heartbeats, or
        held with ``hold=True``); the kept lock has ``mode`` (and a reader
        its ``slot``)."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold, mode=mode)
        return self._keep(rwlock_path(name), query, wait, hold, on_lost)

    def lockset(self, names: Names, *, ttl: Optional[Duration] = None, wait: Optional[Duration] = None,
                owner: Optional[str] = None, max_hold: Optional[Duration] = None, hold: bool = False,
                on_lost: Optional[Callable[[str], None]] = None) -> KeptLock:
        """Take every lock of the set and keep them until released, exactly
        as lock() keeps a lock (heartbeats, or held with ``hold=True``); the
        kept set has its ``locks`` (each with its fence), and is lost as a
        whole when any of them ends."""
        query = acquire_query(ttl=ttl, wait=wait, owner=owner, max_hold=max_hold)
        return self._keep(lockset_path(names), query, wait, hold, on_lost)

    # Watching a lock, and leader election: a lock whose owner names the leader.

    def watch(self, name: str) -> Watch:
        """Follow who holds the lock ``name``: iterate the returned Watch
        for a Change per event (``state`` first), until close(). A broken
        stream is reconnected (watch.py). No token needed: anyone may watch."""
        return Watch(self, name, lock_path(name))

    def campaign(self, name: str, *, owner: str, wait: Duration = "10s", ttl: Optional[Duration] = None,
                 max_hold: Optional[Duration] = None, on_lost: Optional[Callable[[str], None]] = None,
                 stop: Optional[threading.Event] = None) -> KeptLock:
        """Run for leader of ``name`` until elected; the term is the
        returned lock, held over a stream (hold=True) with ``owner``
        naming this candidate to everyone who watches or asks leader().

        Each attempt waits up to ``wait`` in the sidecar's queue; a LockHeld
        (someone else still leads) starts the next at once, until ``stop``
        is set: then that LockHeld is raised. So ``wait`` bounds how long a
        stop takes to be noticed, never how soon a standby takes over: the
        sidecar grants the waiting attempt the moment the leader resigns,
        and within one key ttl of its pod dying. The term's fence is its
        number, greater than every earlier term's; it ends when the lock is
        lost (``lost``, on_lost) or released (leaving the with block
        resigns).
        """
        if seconds(wait) <= 0:
            raise ValueError("a campaign waits in the queue: wait must be positive")
        while True:
            try:
                return self.lock(name, hold=True, wait=wait, owner=owner, ttl=ttl, max_hold=max_hold, on_lost=on_lost)
            except LockHeld:
                if stop is not None and stop.is_set():
                    raise

    def leader(self, name: str) -> Optional[str]:
        """Who leads ``name`` now: the owner of its lock, or None when
        nobody holds it. One inspection; watch() follows the changes."""
        status = self.inspect(name)
        return status.owner if status.held else None

    # The calls above, by URL path: a lock's, a lock set's, a semaphore's or a read/write lock's.

    def _acquire(self, path: str, query: Dict[str, str], wait: Optional[Duration],
                 idempotency_key: Optional[str]) -> Lease:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        _, body = self._call("POST", path, query, headers, self._wait_budget(wait))
        return Lease.from_json(json.loads(body))

    def _extend(self, path: str, token: str, *, ttl: Optional[Duration] = None,
                timeout: Optional[float] = None) -> Lease:
        query = {"ttl": go_duration(ttl)} if ttl is not None else {}
        _, body = self._call("PUT", path, query, {"Lock-Token": token}, timeout=timeout)
        return Lease.from_json(json.loads(body))

    def _release(self, path: str, token: str) -> None:
        self._call("DELETE", path, {}, {"Lock-Token": token})

    def _keep(self, path: str, query: Dict[str, str], wait: Optional[Duration], hold: bool,
              on_lost: Optional[Callable[[str], None]]) -> KeptLock:
        if hold:
            return HeldLock(self, path, {**query, "hold": "true"}, self._wait_budget(wait), on_lost)
        return HeartbeatLock(self, path, self._acquire(path, query, wait, None), on_lost)

    # HTTP.

    def _call(self, method: str, path: str, query: Dict[str, str], headers: Dict[str, str],
              timeout: Optional[float] = None) -> Tuple[int, bytes]:
        """One request on a kept-alive connection; a non-2xx answer raises
        its typed error."""
        try:
            status, body = self._pool.request(method, self._target(path, query), self._headers(headers),
                                              timeout if timeout is not None else self.timeout)
        except (OSError, http.client.HTTPException) as e:
            raise Unreachable("unreachable", 0, f"{method} {path}: {e}") from e
        if status >= 300:
            raise problem_error(status, body)
        return status, body

    def _open_stream(self, path: str, query: Dict[str, str], headers: Dict[str, str],
                     timeout: float) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse, socket.socket]:
        """POST (an acquire with hold) or GET (a watch) that answers an
        event stream, left open for reading; with its socket, whose
        timeout the reader moves."""
        method = "POST" if query.get("hold") == "true" else "GET"
        conn = self._pool.connect(timeout)
        try:
            conn.request(method, self._target(path, query), headers=self._headers(headers))
            sock = conn.sock  # before getresponse, which may hand it to the response
            res = conn.getresponse()
            if res.status >= 300:
                raise problem_error(res.status, res.read())
            if res.status != 200 or not (res.getheader("Content-Type") or "").startswith("text/event-stream"):
                raise Unreachable("unexpected_answer", res.status, f"{method} {path}: not an event stream")
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise Unreachable("unreachable", 0, f"{method} {path}: {e}") from e
        except SidelockError:
            conn.close()
            raise
        return conn, res, sock


def acquire_query(*, ttl: Optional[Duration] = None, wait: Optional[Duration] = None, owner: Optional[str] = None,
                  max_hold: Optional[Duration] = None, permits: Optional[int] = None,
                  mode: Optional[str] = None) -> Dict[str, str]:
    """The query of an acquire (hold is added by the keeper that holds):
    durations always as Go duration strings; a semaphore's permits, a
    read/write lock's mode."""
    query = {k: go_duration(v) for k, v in (("ttl", ttl), ("wait", wait), ("max_hold", max_hold)) if v is not None}
    if owner is not None:
        query["owner"] = owner
    if permits is not None:
        query["permits"] = str(permits)
    if mode is not None:
        query["mode"] = mode
    return query


def problem_error(status: int, body: bytes) -> SidelockError:
    """The typed error of a non-2xx answer (problem details, or not)."""
    try:
        problem = json.loads(body)
    except ValueError:
        problem = None
    if not isinstance(problem, dict) or not problem.get("code"):
        problem = {"code": "http_error", "detail": body.decode("utf-8", "replace").strip()[:512]}
    return error_for(status, problem)

