"""Typed errors from the sidecar's problem details (RFC 9457).

The sidecar answers every error with a stable machine ``code``; the class
of an error is chosen from that code alone (never from the status or the
human ``detail``), so new details or titles never change what a caller
catches.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class SidelockError(Exception):
    """Any error answered by the sidecar, or a failure to reach it.

    ``code`` is the problem's stable code (``lock_held``, ``no_quorum``,
    ...), ``status`` its HTTP status (0 when the sidecar was not reached),
    ``detail`` the human explanation, ``retry_after`` the hint in seconds
    the sidecar gave (None without one).
    """

    def __init__(self, code: str, status: int, detail: str = "",
                 retry_after: Optional[float] = None, problem: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(f"sidelock: {status} {code}: {detail}")
        self.code = code
        self.status = status
        self.detail = detail
        self.retry_after = retry_after
        self.problem: Dict[str, Any] = problem or {}


class LockHeld(SidelockError):
    """409 lock_held: another owner holds the lock (after any wait); for a
    semaphore, all its permits are held; for a read/write lock, the other
    side holds it (or, for a reader, a writer waits); for a lock set, one
    of its locks is held (and the set took none)."""


class PermitsMismatch(SidelockError):
    """409 permits_mismatch: this sidecar has holders or waiters of the
    semaphore with another ``permits``; every caller of a semaphore must
    name the same N. Not a busy semaphore: retrying does not help."""


class SetChanged(SidelockError):
    """409 set_changed: a lock of the set ended while the set was being
    taken; none of its locks is held, and the same call may be made again
    at once."""


class LeaseGone(SidelockError):
    """410 lease_gone: this token no longer holds the lock."""


class Unavailable(SidelockError):
    """503: the sidecar cannot serve now (shutting down, masters too slow)."""


class NoQuorum(Unavailable):
    """503 no_quorum: fewer than a majority of masters answered."""


class Overloaded(SidelockError):
    """429: the sidecar is overloaded or at a limit (locks, waiters,
    watchers); retry after retry_after."""


class Unauthorized(SidelockError):
    """401 unauthorized: the sidecar requires its API token."""


class InvalidRequest(SidelockError):
    """4xx: the request was refused as malformed (bad name, ttl, token...)."""


class IdempotencyMismatch(InvalidRequest):
    """422 idempotency_mismatch: the key was used with other parameters."""


class Unreachable(SidelockError):
    """The sidecar could not be reached, or its answer was not understood."""


# ERRORS_BY_CODE is the one map from a problem code to its class. Codes
# not listed fall back by prefix (invalid_*) or to SidelockError.
ERRORS_BY_CODE: Dict[str, Type[SidelockError]] = {
    "lock_held": LockHeld,
    "permits_mismatch": PermitsMismatch,
    "set_changed": SetChanged,
    "lease_gone": LeaseGone,
    "no_quorum": NoQuorum,
    "shutting_down": Unavailable,
    "timeout": Unavailable,
    "overloaded": Overloaded,
    "too_many_locks": Overloaded,
    "too_many_waiters": Overloaded,
    "too_many_watchers": Overloaded,
    "unauthorized": Unauthorized,
    "idempotency_mismatch": IdempotencyMismatch,
    "missing_token": InvalidRequest,
    "invalid_request": InvalidRequest,
    "ambiguous_framing": InvalidRequest,
    "body_too_large": InvalidRequest,
    "not_found": InvalidRequest,
    "method_not_allowed": InvalidRequest,
}


def error_for(status: int, problem: Dict[str, Any]) -> SidelockError:
    """The typed error for a problem-details body answered with status."""
    code = str(problem.get("code") or "http_error")
    cls = ERRORS_BY_CODE.get(code)
    if cls is None:
        cls = InvalidRequest if code.startswith("invalid_") else SidelockError
    retry_ms = problem.get("retry_after_ms")
    retry_after = retry_ms / 1000 if isinstance(retry_ms, (int, float)) and retry_ms > 0 else None
    return cls(code, status, str(problem.get("detail") or ""), retry_after, problem)
