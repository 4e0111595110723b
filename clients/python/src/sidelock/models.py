"""What the sidecar answers: leases and lock statuses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, Optional

from .times import parse_time


@dataclass(frozen=True)
class Lease:
    """A granted lock, as acquire and extend answer it.

    Act on the lock only before ``valid_until``; pass ``fence`` to any
    resource that must refuse writes from an earlier holder
    (docs/fencing.md).
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

    @classmethod
    def from_json(cls, body: Dict[str, Any]) -> "Lease":
        max_hold_at = body.get("max_hold_at")
        return cls(
            name=body["name"], token=body.get("token", ""), owner=body.get("owner", ""), ttl=body["ttl"],
            acquired_at=parse_time(body["acquired_at"]), lease_expires_at=parse_time(body["lease_expires_at"]),
            valid_until=parse_time(body["valid_until"]), fence=int(body.get("fence", 0)),
            max_hold_at=parse_time(max_hold_at) if max_hold_at else None,
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
