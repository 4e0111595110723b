"""What the sidecar answers: leases, lock, semaphore, read/write lock and
lock set statuses, and the changes a watch reports."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, Literal, Optional, Tuple

from .times import parse_time


#: A read/write lock's side: one of many readers, or the one writer.
Mode = Literal["shared", "exclusive"]


@dataclass(frozen=True)
class SetLock:
    """One lock of a granted lock set: its name, its own fence (pass it to
    what you write under that name) and its own ``valid_until``."""

    name: str
    fence: int
    valid_until: datetime

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "SetLock":
        return cls(name=body["name"], fence=int(body.get("fence", 0)), valid_until=parse_time(body["valid_until"]))


@dataclass(frozen=True)
class Lease:
    """A granted lock, as acquire and extend answer it.

    Act on the lock only before ``valid_until``; pass ``fence`` to any
    resource that must refuse writes from an earlier holder
    (docs/fencing.md). A semaphore's permit also carries ``permits`` (N)
    and ``slot`` (which of the N it holds, 1..N); its fence orders the
    holders of that slot only. A read/write lock's read or write carries
    its ``mode`` ("shared" or "exclusive"); a reader also its ``slot``
    and no fence (0), a writer a fence that orders the writers. A lock
    set's lease is named by the set's canonical name (its names sorted,
    joined by ","), is valid until the earliest of its locks', has no
    fence of its own (0) and lists its ``locks``, each with its fence.
    """

    name: str
    token: str
    owner: str
    ttl: str
    acquired_at: datetime
    lease_expires_at: datetime
    valid_until: datetime
    fence: int
    max_hold_at: Optional[datetime] = None
    permits: Optional[int] = None
    slot: Optional[int] = None
    mode: Optional[str] = None
    locks: Tuple[SetLock, ...] = ()

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Lease":
        max_hold_at = body.get("max_hold_at")
        return cls(
            name=body["name"], token=body.get("token", ""), owner=body.get("owner", ""), ttl=body["ttl"],
            acquired_at=parse_time(body["acquired_at"]), lease_expires_at=parse_time(body["lease_expires_at"]),
            valid_until=parse_time(body["valid_until"]), fence=int(body.get("fence", 0)),
            max_hold_at=parse_time(max_hold_at) if max_hold_at else None,
            permits=optional_int(body.get("permits")), slot=optional_int(body.get("slot")),
            mode=body.get("mode"), locks=tuple(SetLock.from_json(lock) for lock in body.get("locks") or ()),
        )


@dataclass(frozen=True)
class Status:
    """Who holds a lock, read from the masters (never the token)."""

    name: str
    held: bool
    owner: str = ""
    valid_until: Optional[datetime] = None
    fence: Optional[int] = None

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Status":
        valid_until = body.get("valid_until")
        fence = body.get("fence")
        return cls(name=body["name"], held=bool(body["held"]), owner=body.get("owner", ""),
                   valid_until=parse_time(valid_until) if valid_until else None,
                   fence=int(fence) if fence is not None else None)


@dataclass(frozen=True)
class Holder:
    """One holder, as an inspection lists it: a semaphore's held slot (its
    fence orders that slot's holders), or a read/write lock's reader (its
    slot, no fence) or writer (slot 0, the writers' fence)."""

    slot: int
    owner: str
    fence: int
    valid_until: datetime

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Holder":
        return cls(slot=int(body.get("slot", 0)), owner=body.get("owner", ""), fence=int(body.get("fence", 0)),
                   valid_until=parse_time(body["valid_until"]))


#: The holder of a semaphore's slot (the name this client had first).
SemaphoreHolder = Holder


@dataclass(frozen=True)
class SemaphoreStatus:
    """Who holds the permits of a semaphore: ``held`` of ``permits``, with
    one entry per held slot in ``holders``, sorted by slot."""

    name: str
    permits: int
    held: int
    holders: Tuple[Holder, ...] = ()

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "SemaphoreStatus":
        holders = tuple(Holder.from_json(h) for h in body.get("holders") or ())
        return cls(name=body["name"], permits=int(body["permits"]), held=int(body["held"]), holders=holders)


@dataclass(frozen=True)
class RWLockStatus:
    """Who holds a read/write lock: its ``writer`` (None when no writer
    holds it) or its ``readers`` (sorted by slot), and whether a writer
    waits (``writer_waiting``: its intent bars new readers)."""

    name: str
    writer: Optional[Holder] = None
    readers: Tuple[Holder, ...] = ()
    reader_count: int = 0
    writer_waiting: bool = False

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "RWLockStatus":
        writer = body.get("writer")
        readers = tuple(Holder.from_json(r) for r in body.get("readers") or ())
        return cls(name=body["name"], writer=Holder.from_json(writer) if writer else None, readers=readers,
                   reader_count=int(body.get("reader_count", len(readers))),
                   writer_waiting=bool(body.get("writer_waiting")))


@dataclass(frozen=True)
class LockSetStatus:
    """Who holds the locks of a set, read from the masters: each lock as
    inspect() answers it, in canonical order, and how many are ``held``
    (by the set or by anyone)."""

    name: str
    locks: Tuple[Status, ...] = ()
    held: int = 0

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "LockSetStatus":
        locks = tuple(Status.from_json(lock) for lock in body.get("locks") or ())
        return cls(name=body["name"], locks=locks, held=int(body.get("held", 0)))


@dataclass(frozen=True)
class Change:
    """One event of a watched lock (GET /locks/{name}?watch=true).

    ``kind`` is ``state`` (the whole picture: first, and again after each
    reconnect or outage), ``acquired`` (a new holder), ``released`` (the
    name is free; ``reason`` is "released" or "expired") or
    ``unavailable`` (the holder is unknown: the masters could not be
    read, or the stream broke and is being reconnected; ``detail`` says
    which). ``held`` is None while unknown. ``since`` is when the sidecar
    first saw the holder, not when it was granted. A kind this client does
    not know is passed on as it came.
    """

    kind: str
    name: str
    held: Optional[bool]
    owner: str = ""
    fence: Optional[int] = None
    valid_until: Optional[datetime] = None
    since: Optional[datetime] = None
    reason: str = ""
    detail: str = ""

    @classmethod
    def from_event(cls, kind: str, body: Dict[str, Any]) -> "Change":
        held = {"acquired": True, "released": False}.get(kind, body.get("held") if kind == "state" else None)
        valid_until, since = body.get("valid_until"), body.get("since")
        return cls(kind=kind, name=body.get("name", ""), held=None if held is None else bool(held),
                   owner=body.get("owner", ""), fence=optional_int(body.get("fence")),
                   valid_until=parse_time(valid_until) if valid_until else None,
                   since=parse_time(since) if since else None,
                   reason=body.get("reason", ""), detail=body.get("detail", ""))


def optional_int(value: Any) -> Optional[int]:
    """An integer member the answer may leave out."""
    return int(value) if value is not None else None
