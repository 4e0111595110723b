"""Durations and timestamps as the sidecar writes and reads them."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Union

#: A duration: a Go duration string ("30s", "1m30s", "500ms"), a number of
#: seconds, or a timedelta. It is always sent as a Go duration string,
#: which every version of the sidecar accepts.
Duration = Union[str, int, float, _dt.timedelta]

_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def go_duration(d: Duration) -> str:
    """d as a Go duration string; numbers are seconds, to the millisecond."""
    if isinstance(d, str):
        return d
    seconds = d.total_seconds() if isinstance(d, _dt.timedelta) else float(d)
    if seconds < 0:
        raise ValueError(f"a duration must not be negative, got {d!r}")
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


def seconds(d: Duration) -> float:
    """d in seconds; a string is parsed as a Go duration ("1m0s" is 60.0)."""
    if isinstance(d, _dt.timedelta):
        return d.total_seconds()
    if not isinstance(d, str):
        return float(d)
    if d in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _GO_DURATION.finditer(d):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if pos != len(d) or pos == 0:
        raise ValueError(f"not a Go duration: {d!r}")
    return total


_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def parse_time(s: str) -> _dt.datetime:
    """An RFC 3339 timestamp with up to nanoseconds, as Go writes them, as
    an aware datetime (fromisoformat reads neither 'Z' nor nine digits
    before Python 3.11)."""
    m = _TIMESTAMP.match(s)
    if not m:
        raise ValueError(f"not an RFC 3339 timestamp: {s!r}")
    base, fraction, zone = m.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    return _dt.datetime.fromisoformat(f"{base}.{micros}{'+00:00' if zone == 'Z' else zone}")


def now() -> _dt.datetime:
    """The current time, aware, to compare with valid_until."""
    return _dt.datetime.now(_dt.timezone.utc)
