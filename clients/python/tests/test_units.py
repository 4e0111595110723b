"""Units that need no sidecar: durations, timestamps, events, errors."""

import datetime as dt
import unittest

from sidelock import (ERRORS_BY_CODE, Change, InvalidRequest, Lease, LockHeld, LockSetStatus, NoQuorum, Overloaded,
                      PermitsMismatch, RWLockStatus, SemaphoreStatus, SetChanged, SidelockError, Unavailable, lock_path,
                      lockset_path, rwlock_path, semaphore_path)
from sidelock.client import acquire_query, problem_error
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
        retries = []
        events = list(read_events(lambda: next(lines, b""), retries.append))
        self.assertEqual(events, [Event("acquired", "{\"a\":\n1}", "1"), Event("lost", "{}", "2")])
        self.assertEqual(retries, [1000])


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

    def test_semaphore_and_watch_codes(self) -> None:
        mismatch = problem_error(409, b'{"code":"permits_mismatch","detail":"3 permits, not 2"}')
        self.assertIsInstance(mismatch, PermitsMismatch)
        self.assertNotIsInstance(mismatch, LockHeld)  # a caller's mistake, not a busy semaphore
        self.assertIsInstance(problem_error(429, b'{"code":"too_many_watchers"}'), Overloaded)
        self.assertIsInstance(problem_error(400, b'{"code":"invalid_permits"}'), InvalidRequest)

    def test_a_set_changed_is_not_a_held_lock(self) -> None:
        changed = problem_error(409, b'{"code":"set_changed","detail":"a lock of the set ended"}')
        self.assertIsInstance(changed, SetChanged)
        self.assertNotIsInstance(changed, LockHeld)  # nothing is held: the same call may be made again


class PathTest(unittest.TestCase):
    def test_segments_are_escaped_one_by_one(self) -> None:
        self.assertEqual(lock_path("orders/42"), "/locks/orders/42")
        self.assertEqual(lock_path("a?b/c#d"), "/locks/a%3Fb/c%23d")
        self.assertEqual(semaphore_path("a?b/c#d"), "/semaphores/a%3Fb/c%23d")
        self.assertEqual(rwlock_path("a?b/c#d"), "/rwlocks/a%3Fb/c%23d")

    def test_a_lockset_path_escapes_each_name(self) -> None:
        self.assertEqual(lockset_path(["b/2", "a?1"]), "/locksets/b/2,a%3F1")
        self.assertEqual(lockset_path("b/2,a?1"), lockset_path(["b/2", "a?1"]))

    def test_permits_are_sent_with_the_acquire(self) -> None:
        self.assertEqual(acquire_query(ttl=5, permits=3, owner="w"), {"ttl": "5s", "owner": "w", "permits": "3"})
        self.assertNotIn("permits", acquire_query(ttl=5))

    def test_the_mode_is_sent_with_the_acquire(self) -> None:
        self.assertEqual(acquire_query(owner="r", mode="shared"), {"owner": "r", "mode": "shared"})
        self.assertNotIn("mode", acquire_query(ttl=5, permits=3))


class ModelTest(unittest.TestCase):
    LEASE = {"name": "pool", "token": "ab" * 16, "owner": "w", "ttl": "30s", "acquired_at": "2026-01-01T10:00:00Z",
             "lease_expires_at": "2026-01-01T10:00:30Z", "valid_until": "2026-01-01T10:00:09.5Z", "fence": 17}

    def test_a_permit_carries_permits_and_slot(self) -> None:
        permit = Lease.from_json({**self.LEASE, "permits": 3, "slot": 2})
        self.assertEqual((permit.permits, permit.slot, permit.fence), (3, 2, 17))
        lock = Lease.from_json(self.LEASE)
        self.assertEqual((lock.permits, lock.slot), (None, None))

    def test_semaphore_status_lists_held_slots(self) -> None:
        status = SemaphoreStatus.from_json({"name": "pool", "permits": 3, "held": 2, "holders": [
            {"slot": 1, "owner": "a", "fence": 17, "valid_until": "2026-01-01T10:00:09Z"},
            {"slot": 3, "owner": "b", "fence": 4, "valid_until": "2026-01-01T10:00:08Z"}]})
        self.assertEqual((status.permits, status.held), (3, 2))
        self.assertEqual([(h.slot, h.owner, h.fence) for h in status.holders], [(1, "a", 17), (3, "b", 4)])
        self.assertEqual(SemaphoreStatus.from_json({"name": "pool", "permits": 3, "held": 0}).holders, ())

    def test_a_read_or_write_carries_its_mode(self) -> None:
        reader = Lease.from_json({**self.LEASE, "fence": 0, "mode": "shared", "slot": 7})
        self.assertEqual((reader.mode, reader.slot, reader.fence, reader.permits), ("shared", 7, 0, None))
        self.assertIsNone(Lease.from_json(self.LEASE).mode)

    def test_rwlock_status_has_a_writer_or_readers(self) -> None:
        t = "2026-01-01T10:00:09Z"
        read = RWLockStatus.from_json({"name": "books", "writer": None, "readers": [
            {"slot": 2, "owner": "a", "valid_until": t}, {"slot": 9, "owner": "b", "valid_until": t}],
            "reader_count": 2, "writer_waiting": True})
        self.assertEqual((read.writer, read.reader_count, read.writer_waiting), (None, 2, True))
        self.assertEqual([(r.slot, r.owner, r.fence) for r in read.readers], [(2, "a", 0), (9, "b", 0)])
        written = RWLockStatus.from_json({"name": "books", "writer": {"owner": "w", "fence": 12, "valid_until": t},
                                          "readers": [], "reader_count": 0, "writer_waiting": False})
        self.assertEqual((written.writer and written.writer.owner, written.writer and written.writer.fence), ("w", 12))
        self.assertEqual((written.readers, written.writer_waiting), ((), False))

    def test_a_lockset_lease_lists_its_locks(self) -> None:
        t1, t2 = "2026-01-01T10:00:09.5Z", "2026-01-01T10:00:09.7Z"
        body = {**self.LEASE, "name": "a,b", "valid_until": t1, "locks": [
            {"name": "a", "fence": 3, "valid_until": t1}, {"name": "b", "fence": 4, "valid_until": t2}]}
        del body["fence"]
        lease = Lease.from_json(body)
        self.assertEqual((lease.name, lease.fence), ("a,b", 0))
        self.assertEqual([(lock.name, lock.fence, lock.valid_until) for lock in lease.locks],
                         [("a", 3, parse_time(t1)), ("b", 4, parse_time(t2))])
        self.assertEqual(Lease.from_json(self.LEASE).locks, ())

    def test_lockset_status_lists_each_lock(self) -> None:
        status = LockSetStatus.from_json({"name": "a,b", "held": 1, "locks": [
            {"name": "a", "held": True, "owner": "w", "fence": 3, "valid_until": "2026-01-01T10:00:09Z"},
            {"name": "b", "held": False}]})
        self.assertEqual((status.name, status.held), ("a,b", 1))
        self.assertEqual([(s.name, s.held, s.owner, s.fence) for s in status.locks], [("a", True, "w", 3), ("b", False, "", None)])

    def test_changes_of_a_watch(self) -> None:
        t = "2026-01-01T10:00:09Z"
        held = Change.from_event("state", {"name": "x", "held": True, "owner": "a", "fence": 3, "valid_until": t, "since": t})
        self.assertEqual((held.kind, held.held, held.owner, held.fence), ("state", True, "a", 3))
        self.assertEqual(held.since, parse_time(t))
        free = Change.from_event("state", {"name": "x", "held": False})
        self.assertEqual((free.held, free.owner, free.fence, free.valid_until), (False, "", None, None))
        acquired = Change.from_event("acquired", {"name": "x", "owner": "b", "fence": 4, "valid_until": t, "since": t})
        self.assertEqual((acquired.held, acquired.owner, acquired.fence), (True, "b", 4))
        released = Change.from_event("released", {"name": "x", "reason": "expired"})
        self.assertEqual((released.held, released.reason), (False, "expired"))
        unknown = Change.from_event("unavailable", {"name": "x", "detail": "no quorum"})
        self.assertEqual((unknown.held, unknown.detail), (None, "no quorum"))


if __name__ == "__main__":
    unittest.main()
