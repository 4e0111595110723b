"""sidelock: distributed locks from the pod's sidecar, with the standard
library only.

    from sidelock import Client

    client = Client()  # $SIDELOCK_ADDR, else http://127.0.0.1:7420
    with client.lock("orders/42", ttl="30s") as lock:
        ...  # act while lock.valid(); pass lock.fence to what you write

Lock sets (client.lockset), semaphores (client.semaphore), read/write locks
(client.rwlock), watching a lock (client.watch) and leader election
(client.campaign, client.leader) follow the same shape. For asyncio,
AsyncClient has the same calls, awaited:

    from sidelock import AsyncClient

    async with AsyncClient() as client:
        async with client.lock("orders/42", ttl="30s") as lock:
            ...

docs/clients.md describes every call.
"""

from .aio import AsyncClient, AsyncHeartbeatLock, AsyncHeldLock, AsyncKeptLock, AsyncWatch
from .client import DEFAULT_ADDR, Client, lock_path, lockset_path, rwlock_path, semaphore_path
from .errors import (ERRORS_BY_CODE, IdempotencyMismatch, InvalidRequest, LeaseGone, LockHeld, NoQuorum,
                     Overloaded, PermitsMismatch, SetChanged, SidelockError, Unauthorized, Unavailable, Unreachable)
from .keep import HeartbeatLock, HeldLock, KeptLock
from .models import (Change, Holder, Lease, LockSetStatus, Mode, RWLockStatus, SemaphoreHolder, SemaphoreStatus,
                     SetLock, Status)
from .times import Duration
from .watch import Watch

__version__ = "0.4.0"

__all__ = [
    "AsyncClient", "AsyncHeartbeatLock", "AsyncHeldLock", "AsyncKeptLock", "AsyncWatch", "DEFAULT_ADDR", "Change",
    "Client", "Duration", "ERRORS_BY_CODE", "HeartbeatLock", "HeldLock", "Holder", "IdempotencyMismatch",
    "InvalidRequest", "KeptLock", "Lease", "LeaseGone", "LockHeld", "LockSetStatus", "Mode", "NoQuorum", "Overloaded",
    "PermitsMismatch", "RWLockStatus", "SemaphoreHolder", "SemaphoreStatus", "SetChanged", "SetLock", "SidelockError",
    "Status", "Unauthorized", "Unavailable", "Unreachable", "Watch", "lock_path", "lockset_path", "rwlock_path",
    "semaphore_path",
]
