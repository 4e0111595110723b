"""Locks (and lock sets, semaphore permits, read/write locks' reads and
writes) kept alive for the caller until released: by heartbeats, or held
over an event stream. Client.lock, Client.lockset, Client.semaphore,
Client.rwlock and Client.campaign make them."""

from __future__ import annotations

import dataclasses
import http.client
import json
import socket
import threading
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Dict, Iterator, Optional, Tuple, Type

from .errors import LeaseGone, SidelockError, Unreachable
from .models import Lease, SetLock
from .sse import Event, read_events
from .times import Duration, now, parse_time, seconds

if TYPE_CHECKING:
    from .client import Client

#: The shortest pause between two heartbeats, so a tiny ttl cannot spin.
MIN_HEARTBEAT = 0.05


def expiry_reason(lease: Lease) -> str:
    """Why a lease whose valid_until passed without news ended: its
    max_hold if that is what capped the validity, else "expired"."""
    if lease.max_hold_at is not None and lease.valid_until >= lease.max_hold_at:
        return "max_hold"
    return "expired"


def seconds_left(lease: Lease) -> float:
    """How long the lease's valid_until is away (negative once passed)."""
    return (lease.valid_until - now()).total_seconds()


def heartbeat_interval(lease: Lease) -> float:
    """The pause before the next heartbeat: a third of the shorter of the
    ttl and the validity, so two heartbeats can fail before either runs out."""
    return max(min(seconds(lease.ttl), seconds_left(lease)) / 3, MIN_HEARTBEAT)


def retry_delay(last: float, left: float) -> float:
    """The pause after a heartbeat that failed: sooner, until valid_until."""
    return max(min(last, left / 3), MIN_HEARTBEAT)


class Beats:
    """The heartbeats of one lease, decided here for the blocking and the
    asyncio keepers alike: ``pause`` before the next one; ``due()`` the
    timeout it has (None once valid_until passed: ``lost`` says why); then
    ``renewed(lease)`` or ``failed(error)`` (a reason when it is lost)."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.pause = heartbeat_interval(lease)
        self.lost: Optional[str] = None
        self._left = 0.0

    def due(self) -> Optional[float]:
        self._left = seconds_left(self.lease)
        if self._left <= 0:
            self.lost = expiry_reason(self.lease)
            return None
        return self._left

    def renewed(self, lease: Lease) -> None:
        self.lease, self.pause = lease, heartbeat_interval(lease)

    def failed(self, error: SidelockError) -> Optional[str]:
        if isinstance(error, LeaseGone):
            return "lease_gone"
        self.pause = retry_delay(self.pause, self._left)  # sooner, until valid_until
        return None


def held_event(lease: Lease, event: Event) -> Tuple[Lease, Optional[str]]:
    """What one event of a held stream does to its lease: the lease with a
    renewed valid_until, and the reason it was lost (None while held)."""
    data = json.loads(event.data)
    if event.event in ("renewed", "expiring"):
        return dataclasses.replace(lease, valid_until=parse_time(data["valid_until"])), None
    if event.event in ("lost", "released"):
        return lease, data.get("reason") or event.event
    return lease, None


def first_lease(event: Optional[Event]) -> Lease:
    """The lease a held stream opens with (its "acquired" event)."""
    if event is None or event.event != "acquired":
        raise Unreachable("unexpected_answer", 200, f"the held stream opened with {event!r}, not acquired")
    return Lease.from_json(json.loads(event.data))


class LeaseView:
    """A kept lock's fields, read from its latest lease (the blocking and the
    asyncio keepers share them)."""

    lost_reason: Optional[str] = None

    @property
    def lease(self) -> Lease:
        """The latest lease: its valid_until moves with each renewal."""
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.lease.name

    @property
    def token(self) -> str:
        return self.lease.token

    @property
    def fence(self) -> int:
        """The grant's fencing token (docs/fencing.md): pass it along."""
        return self.lease.fence

    @property
    def permits(self) -> Optional[int]:
        """A semaphore's N (None for a lock)."""
        return self.lease.permits

    @property
    def slot(self) -> Optional[int]:
        """Which of a semaphore's N slots this permit holds, or which reader
        slot a read/write lock's reader holds (None for a lock)."""
        return self.lease.slot

    @property
    def mode(self) -> Optional[str]:
        """A read/write lock's side: "shared" or "exclusive" (None else)."""
        return self.lease.mode

    @property
    def locks(self) -> Tuple[SetLock, ...]:
        """A lock set's locks, in canonical order, each with its own fence
        (empty for anything else)."""
        return self.lease.locks

    @property
    def valid_until(self) -> datetime:
        """Act on the lock only before this instant (UTC)."""
        return self.lease.valid_until

    def valid(self) -> bool:
        """True while the lock is held and its valid_until has not passed."""
        return not self._ended() and now() < self.valid_until

    def _ended(self) -> bool:
        """Lost or released."""
        raise NotImplementedError


class KeptLock(LeaseView):
    """A lock kept alive until released; a context manager.

    ``valid()`` is the check to make before acting: the lock was not lost
    and its ``valid_until`` has not passed. ``lost`` (a threading.Event)
    is set, and ``on_lost(reason)`` called once, when the lock is lost:
    the sidecar said so ("lost", "max_hold", "expired", "shutdown",
    "released" by someone else), a heartbeat was refused ("lease_gone"),
    the held stream broke ("disconnected"), or ``valid_until`` passed
    without a renewal ("expired", or "max_hold" when that capped it).
    ``lost_reason`` says which. Releasing sets neither. ``extend()``
    pushes the lease out at once. A semaphore's permit is one too, with
    its ``permits`` and ``slot``; so is a read/write lock's read or write,
    with its ``mode`` (and a reader's ``slot``), and a lock set, with its
    ``locks`` (it is lost as a whole when any of them ends).
    """

    def __init__(self, client: "Client", path: str, lease: Lease, on_lost: Optional[Callable[[str], None]]) -> None:
        self._client = client
        self._path = path  # /locks/..., /locksets/..., /semaphores/... or /rwlocks/...: where extend and release go
        self._lease = lease
        self._on_lost = on_lost
        self._mu = threading.Lock()
        self._released = threading.Event()
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None

    @property
    def lease(self) -> Lease:
        """The latest lease: its valid_until moves with each renewal."""
        with self._mu:
            return self._lease

    def _ended(self) -> bool:
        return self.lost.is_set() or self._released.is_set()

    def release(self) -> None:
        """Give the lock up (once; later calls do nothing)."""
        raise NotImplementedError

    def extend(self, ttl: Optional[Duration] = None) -> Lease:
        """Push the lease out now (with a new ``ttl`` when given) and return
        the fresh lease; later heartbeats keep that ttl. Raises LeaseGone,
        and marks the lock lost, once the token no longer holds it."""
        try:
            lease = self._client._extend(self._path, self.token, ttl=ttl)
        except LeaseGone:
            self._mark_lost("lease_gone")
            raise
        self._set_lease(lease)
        return lease

    def _set_lease(self, lease: Lease) -> None:
        with self._mu:
            self._lease = lease

    def _mark_lost(self, reason: str) -> None:
        with self._mu:
            if self.lost.is_set() or self._released.is_set():
                return
            self.lost_reason = reason
            self.lost.set()
        if self._on_lost is not None:
            self._on_lost(reason)

    def __enter__(self) -> "KeptLock":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.release()


class HeartbeatLock(KeptLock):
    """A lease extended by a background thread at a third of the shorter
    of its ttl and its validity, so two heartbeats can fail before
    either runs out."""

    def __init__(self, client: "Client", path: str, lease: Lease, on_lost: Optional[Callable[[str], None]]) -> None:
        super().__init__(client, path, lease, on_lost)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"sidelock heartbeat {lease.name}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        if self._released.is_set():
            return
        self._released.set()
        self._stop.set()
        self._thread.join()  # at most one extend in flight, bounded by the validity left
        try:
            self._client._release(self._path, self.token)
        except LeaseGone:
            pass  # it had ended already: nothing to give up

    def _beat(self) -> None:
        beats = Beats(self.lease)
        while not self._stop.wait(beats.pause):
            timeout = beats.due()
            if timeout is None:
                return self._mark_lost(beats.lost or "expired")
            try:
                lease = self._client._extend(self._path, self.token, timeout=timeout)
            except SidelockError as e:
                lost = beats.failed(e)
                if lost:
                    return self._mark_lost(lost)
                continue
            self._set_lease(lease)
            beats.renewed(lease)


class HeldLock(KeptLock):
    """A lock held over a server-sent events stream (POST ?hold=true).

    A reader thread follows the stream: each "renewed" moves valid_until,
    a final "lost" or "released" (not asked for) marks the lock lost, and
    so does a stream that ends or stays silent past valid_until. It never
    reconnects: a new stream would be a new acquisition.
    """

    def __init__(self, client: "Client", path: str, query: Dict[str, str], budget: float,
                 on_lost: Optional[Callable[[str], None]]) -> None:
        self._deadline: Optional[datetime] = None  # reads time out at valid_until once held
        self._conn, self._res, self._sock = client._open_stream(path, query, {}, budget)
        try:
            self._events: Iterator[Event] = read_events(self._readline)
            lease = first_lease(next(self._events, None))
        except (OSError, ValueError, http.client.HTTPException) as e:
            self._close()
            raise Unreachable("unreachable", 0, f"reading the held stream: {e}") from e
        except SidelockError:
            self._close()
            raise
        super().__init__(client, path, lease, on_lost)
        self._deadline = lease.valid_until
        self._thread = threading.Thread(target=self._read, name=f"sidelock hold {lease.name}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        if self._released.is_set():
            return
        self._released.set()
        try:
            self._client._release(self._path, self.token)  # frees it now; closing would too, a moment later
        except SidelockError:
            pass  # already ended, or the sidecar unreachable: closing the stream releases
        finally:
            self._wake()
            self._thread.join()  # the reader closes the stream

    def _readline(self) -> bytes:
        if self._deadline is not None:
            self._sock.settimeout(max((self._deadline - now()).total_seconds(), 0.001))
        return self._res.readline()

    def _read(self) -> None:
        try:
            for event in self._events:
                lease, lost = held_event(self.lease, event)
                if lost is not None:
                    self._mark_lost(lost)
                    return
                self._set_lease(lease)
                self._deadline = lease.valid_until
            self._mark_lost("disconnected")
        except socket.timeout:
            self._mark_lost(expiry_reason(self.lease))
        except (OSError, ValueError, KeyError, http.client.HTTPException):
            self._mark_lost("disconnected")
        finally:
            self._close()

    def _wake(self) -> None:
        """Ends the connection under a reader blocked on it, which then
        closes the stream: only the reader's thread touches the response."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _close(self) -> None:
        self._wake()
        self._res.close()
        self._conn.close()
