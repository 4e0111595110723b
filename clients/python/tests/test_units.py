"""Units that need no sidecar: durations, timestamps, events, errors."""

import datetime as dt
import unittest

from sidelock import ERRORS_BY_CODE, InvalidRequest, LockHeld, NoQuorum, SidelockError, Unavailable, lock_path
from sidelock.client import problem_error
from sidelock.sse import Event, read_events
from sidelock.times import go_duration, parse_time, seconds


class DurationTest(unittest.TestCase):
    def test_sent_as_go_durations(self) -> None:
        self.assertEqual(go_duration("1m30s"), "1m30s")
        self.assertEqual(go_duration(30), "30s")
        self.assertEqual(go_duration(1.5), "1500ms")
        self.assertEqual(go_duration(dt.timedelta(minutes=2)), "120s")
        with self.assertRaises(ValueError):
            go_duration(-1)

    def test_go_durations_read_as_seconds(self) -> None:
        for text, want in (("30s", 30.0), ("1m0s", 60.0), ("1h0m0s", 3600.0), ("1.5s", 1.5), ("500ms", 0.5),
                           ("0s", 0.0), ("2m3.5s", 123.5), ("10µs", 1e-5)):
            self.assertAlmostEqual(seconds(text), want, msg=text)
        for bad in ("30", "s", "1x", "1s2"):
            with self.assertRaises(ValueError, msg=bad):
                seconds(bad)


class TimestampTest(unittest.TestCase):
    def test_nanoseconds_and_zulu(self) -> None:
        t = parse_time("2026-11-24T06:27:37.664147234Z")
        self.assertEqual(t, dt.datetime(2026, 11, 24, 6, 27, 37, 664147, tzinfo=dt.timezone.utc))
        self.assertEqual(parse_time("2026-11-24T06:27:37Z").microsecond, 0)
        self.assertEqual(parse_time("2026-11-24T07:27:37.5+01:00"), parse_time("2026-11-24T06:27:37.5Z"))


class EventsTest(unittest.TestCase):
    def test_reads_the_event_stream_format(self) -> None:
        lines = iter([b"retry: 1000\n", b"\n", b": a comment\n", b"id: 1\n", b"event: acquired\n",
                      b"data: {\"a\":\n", b"data:1}\n", b"\n", b"id: 2\r\n", b"event: lost\r\n",
                      b"data: {}\r\n", b"\r\n", b"event: cut\n", b"data: x\n"])
        events = list(read_events(lambda: next(lines, b"")))
        self.assertEqual(events, [Event("acquired", "{\"a\":\n1}", "1"), Event("lost", "{}", "2")])


class ErrorTest(unittest.TestCase):
    def test_the_class_follows_the_code(self) -> None:
        e = problem_error(409, b'{"code":"lock_held","status":409,"detail":"held","retry_after_ms":1500}')
        self.assertIsInstance(e, LockHeld)
        self.assertEqual((e.code, e.status, e.detail, e.retry_after), ("lock_held", 409, "held", 1.5))
        self.assertIsInstance(problem_error(503, b'{"code":"no_quorum"}'), NoQuorum)
        self.assertIsInstance(problem_error(503, b'{"code":"no_quorum"}'), Unavailable)
        # A code this client does not know yet: by prefix, else the base class.
        self.assertIsInstance(problem_error(400, b'{"code":"invalid_max_hold"}'), InvalidRequest)
        unknown = problem_error(418, b"not json")
        self.assertIs(type(unknown), SidelockError)
        self.assertEqual((unknown.code, unknown.detail), ("http_error", "not json"))
        self.assertIn("lock_held", ERRORS_BY_CODE)


class PathTest(unittest.TestCase):
    def test_segments_are_escaped_one_by_one(self) -> None:
        self.assertEqual(lock_path("orders/42"), "/locks/orders/42")
        self.assertEqual(lock_path("a?b/c#d"), "/locks/a%3Fb/c%23d")


if __name__ == "__main__":
    unittest.main()
