"""sidelock: distributed locks from the pod's sidecar, with the standard
library only.

    from sidelock import Client

    client = Client()  # $SIDELOCK_ADDR, else http://127.0.0.1:7420
    with client.lock("orders/42", ttl="30s") as lock:
        ...  # act while lock.valid(); pass lock.fence to what you write

docs/clients.md describes every call.
"""

from .client import DEFAULT_ADDR, Client, lock_path
from .errors import (ERRORS_BY_CODE, IdempotencyMismatch, InvalidRequest, LeaseGone, LockHeld, NoQuorum,
                     Overloaded, SidelockError, Unauthorized, Unavailable, Unreachable)
from .keep import HeartbeatLock, HeldLock, KeptLock
from .models import Lease, Status
from .times import Duration

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ADDR", "Client", "Duration", "ERRORS_BY_CODE", "HeartbeatLock", "HeldLock", "IdempotencyMismatch",
    "InvalidRequest", "KeptLock", "Lease", "LeaseGone", "LockHeld", "NoQuorum", "Overloaded", "SidelockError",
    "Status", "Unauthorized", "Unavailable", "Unreachable", "lock_path",
]
