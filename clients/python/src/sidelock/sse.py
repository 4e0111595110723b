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


class EventParser:
    """Events from a stream's lines, fed one at a time (the blocking and the
    asyncio readers share it).

    Follows the format's rules that matter here: comments (":...") are
    skipped, data lines are joined with newlines, one optional space after
    the colon is dropped, and an event is dispatched at the blank line that
    ends it. A valid ``retry`` (milliseconds) goes to on_retry, for a
    reader that reconnects.
    """

    def __init__(self, on_retry: Optional[Callable[[int], None]] = None) -> None:
        self._on_retry = on_retry
        self._kind = ""
        self._data: List[str] = []
        self._id: Optional[str] = None

    def feed(self, raw: bytes) -> Optional[Event]:
        """The event this line ends, if it ends one."""
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            event = Event(self._kind or "message", "\n".join(self._data), self._id) if self._data else None
            self._kind, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            self._kind = value
        elif field == "data":
            self._data.append(value)
        elif field == "id":
            self._id = value
        elif field == "retry" and value.isascii() and value.isdigit() and self._on_retry is not None:
            self._on_retry(int(value))
        return None


def read_events(readline: Callable[[], bytes], on_retry: Optional[Callable[[int], None]] = None) -> Iterator[Event]:
    """Yield the events of a stream read line by line until it ends."""
    parser = EventParser(on_retry)
    while True:
        raw = readline()
        if not raw:
            return
        event = parser.feed(raw)
        if event is not None:
            yield event
