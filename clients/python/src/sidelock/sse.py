"""A reader of server-sent events (the text/event-stream format)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional


@dataclass(frozen=True)
class Event:
    """One event: its type ("acquired", "renewed", ...), data and id."""

    event: str
    data: str
    id: Optional[str] = None


def read_events(readline: Callable[[], bytes], on_retry: Optional[Callable[[int], None]] = None) -> Iterator[Event]:
    """Yield the events of a stream read line by line until it ends.

    Follows the format's rules that matter here: comments (":...") are
    skipped, data lines are joined with newlines, one optional space after
    the colon is dropped, and an event is dispatched at the blank line that
    ends it. A valid ``retry`` (milliseconds) goes to on_retry, for a
    reader that reconnects.
    """
    kind = ""
    data: List[str] = []
    event_id: Optional[str] = None
    while True:
        raw = readline()
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield Event(kind or "message", "\n".join(data), event_id)
            kind, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            kind = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            event_id = value
        elif field == "retry" and value.isascii() and value.isdigit() and on_retry is not None:
            on_retry(int(value))
