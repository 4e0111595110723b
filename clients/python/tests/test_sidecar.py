"""The client against a real sidecar at $SIDELOCK_ADDR (clients_test.go
starts one over three real redis-server masters)."""

import os
import subprocess
import sys
import threading
import time
import unittest
import uuid
from typing import Iterator, List

from sidelock import (Change, Client, IdempotencyMismatch, InvalidRequest, KeptLock, LeaseGone, LockHeld,
                      PermitsMismatch, RWLockStatus, SidelockError, Unreachable, Watch)
from sidelock.times import now


def unique(prefix: str) -> str:
    """A lock name of this test alone."""
    return f"py/{prefix}/{uuid.uuid4().hex[:12]}"


@unittest.skipUnless(os.environ.get("SIDELOCK_ADDR"), "needs a sidecar at $SIDELOCK_ADDR")
class SidecarTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = Client(timeout=10)
        self.addCleanup(self.client.close)

    def test_acquire_inspect_extend_release(self) -> None:
        c, name = self.client, unique("basic")
        lease = c.acquire(name, ttl="30s", owner="py-test")
        self.assertEqual((lease.name, lease.owner, lease.ttl, len(lease.token)), (name, "py-test", "30s", 32))
        self.assertGreater(lease.fence, 0)
        self.assertGreater(lease.valid_until, now())
        status = c.inspect(name)
        self.assertEqual((status.held, status.owner, status.fence), (True, "py-test", lease.fence))
        extended = c.extend(name, lease.token, ttl=60)
        self.assertEqual((extended.token, extended.ttl, extended.fence), (lease.token, "1m0s", lease.fence))
        self.assertGreaterEqual(extended.lease_expires_at, lease.lease_expires_at)
        c.release(name, lease.token)
        self.assertFalse(c.inspect(name).held)
        with self.assertRaises(LeaseGone) as gone:
            c.extend(name, lease.token)
        self.assertEqual((gone.exception.code, gone.exception.status), ("lease_gone", 410))

    def test_a_held_lock_is_lock_held(self) -> None:
        c, name = self.client, unique("conflict")
        lease = c.acquire(name, ttl="30s")
        with self.assertRaises(LockHeld) as held:
            c.acquire(name)
        e = held.exception
        self.assertEqual((e.code, e.status), ("lock_held", 409))
        self.assertTrue(e.detail)
        self.assertIsNotNone(e.retry_after)
        c.release(name, lease.token)

    def test_bad_input_is_invalid_request(self) -> None:
        c = self.client
        with self.assertRaises(InvalidRequest) as bad:
            c.acquire("orders/../42")
        self.assertEqual((bad.exception.code, bad.exception.status), ("invalid_name", 400))
        with self.assertRaises(InvalidRequest) as bad:
            c.acquire(unique("ttl"), ttl="soon")
        self.assertEqual(bad.exception.code, "invalid_ttl")
        with self.assertRaises(InvalidRequest) as bad:
            c.extend(unique("token"), "not-a-token")
        self.assertEqual(bad.exception.code, "invalid_token")

    def test_an_unreachable_sidecar_is_unreachable(self) -> None:
        with self.assertRaises(Unreachable) as down:
            Client("http://127.0.0.1:9", timeout=2).inspect("x")
        self.assertEqual(down.exception.status, 0)

    def test_idempotent_acquire_returns_the_same_lease(self) -> None:
        c, name, key = self.client, unique("idem"), str(uuid.uuid4())
        first = c.acquire(name, ttl="30s", idempotency_key=key)
        again = c.acquire(name, ttl="30s", idempotency_key=key)
        self.assertEqual(again.token, first.token)
        with self.assertRaises(IdempotencyMismatch) as mismatch:
            c.acquire(name, ttl="31s", idempotency_key=key)
        self.assertEqual(mismatch.exception.status, 422)
        c.release(name, first.token)

    def test_wait_is_granted_when_the_holder_releases(self) -> None:
        c, name = self.client, unique("wait")
        first = c.acquire(name, ttl="30s")
        releaser = threading.Timer(0.5, c.release, args=(name, first.token))
        releaser.start()
        started = time.monotonic()
        second = c.acquire(name, wait="20s")
        waited = time.monotonic() - started
        releaser.join()
        self.assertGreaterEqual(waited, 0.4)
        self.assertLess(waited, 15)
        self.assertNotEqual(second.token, first.token)
        self.assertGreater(second.fence, first.fence)  # fences only grow
        c.release(name, second.token)

    def test_scoped_lock_is_released_on_an_exception(self) -> None:
        c, name = self.client, unique("scoped")
        with self.assertRaises(RuntimeError):
            with c.lock(name, ttl="30s") as lock:
                self.assertTrue(lock.valid())
                self.assertTrue(c.inspect(name).held)
                raise RuntimeError("the work failed")
        self.assertFalse(c.inspect(name).held)
        self.assertFalse(lock.lost.is_set())  # released, not lost
        c.release(name, c.acquire(name).token)  # anyone may take it at once

    def test_scoped_lock_outlives_its_ttl(self) -> None:
        c, name = self.client, unique("heartbeat")
        with c.lock(name, ttl="2s") as lock:
            first_valid_until = lock.valid_until
            time.sleep(5)  # two and a half ttls: only the heartbeats keep it
            self.assertTrue(lock.valid(), lock.lost_reason)
            self.assertGreater(lock.valid_until, first_valid_until)
            status = c.inspect(name)
            self.assertEqual((status.held, status.fence), (True, lock.fence))
            with self.assertRaises(LockHeld):
                c.acquire(name)
        self.assertFalse(c.inspect(name).held)

    def test_scoped_lock_reports_max_hold_as_lost(self) -> None:
        c, name = self.client, unique("heartbeat-max-hold")
        reasons: List[str] = []
        lock = c.lock(name, ttl="30s", max_hold="2s", on_lost=reasons.append)
        self.assertTrue(lock.lost.wait(15), "lost never set")
        self.assertFalse(lock.valid())
        self.assertEqual(reasons, [lock.lost_reason])
        self.assertIn(lock.lost_reason, ("max_hold", "lease_gone"))
        lock.release()  # the lease is gone already: nothing to do, no error
        self.assertFalse(c.inspect(name).held)

    def test_held_lock_is_kept_without_heartbeats(self) -> None:
        c, name = self.client, unique("hold")
        with c.lock(name, hold=True, ttl="2s") as held:
            first_valid_until = held.valid_until
            self.assertEqual(len(held.token), 32)
            self.assertGreater(held.fence, 0)
            time.sleep(3)  # past the ttl: renewed by the sidecar while the stream is open
            self.assertTrue(held.valid(), held.lost_reason)
            self.assertGreater(held.valid_until, first_valid_until)
            with self.assertRaises(LockHeld):
                c.acquire(name)
        self.assertFalse(c.inspect(name).held)  # released when the block ended, not a moment later

    def test_held_lock_lost_at_max_hold_is_never_taken_again(self) -> None:
        c, name = self.client, unique("hold-max-hold")
        reasons: List[str] = []
        held = c.lock(name, hold=True, max_hold="2s", on_lost=reasons.append)
        self.assertIsNotNone(held.lease.max_hold_at)
        self.assertTrue(held.lost.wait(15), "lost never set")
        self.assertEqual(held.lost_reason, "max_hold")
        self.assertEqual(reasons, ["max_hold"])
        self.assertFalse(held.valid())
        time.sleep(1.5)  # a reconnecting client would have taken it again by now
        self.assertFalse(c.inspect(name).held)
        other = c.acquire(name, ttl="30s")
        self.assertGreater(other.fence, held.fence)
        held.release()  # must not touch the new holder's lease
        self.assertEqual(c.inspect(name).fence, other.fence)
        c.release(name, other.token)

    def test_held_lock_waits_for_the_holder(self) -> None:
        c, name = self.client, unique("hold-wait")
        first = c.acquire(name, ttl="30s")
        threading.Timer(0.3, c.release, args=(name, first.token)).start()
        with c.lock(name, hold=True, wait="20s") as held:
            self.assertGreater(held.fence, first.fence)
        with self.assertRaises(SidelockError):
            c.lock(name, hold=True, ttl="0s")  # refused before any stream opens

    def test_semaphore_admits_permits_holders(self) -> None:
        c, name = self.client, unique("semaphore")
        a = c.acquire_semaphore(name, 2, ttl="30s", owner="a")
        b = c.acquire_semaphore(name, 2, ttl="30s", owner="b")
        self.assertEqual(((a.permits, b.permits), sorted((a.slot, b.slot))), ((2, 2), [1, 2]))
        with self.assertRaises(LockHeld) as full:
            c.acquire_semaphore(name, 2, owner="c")
        self.assertEqual(full.exception.status, 409)
        with self.assertRaises(PermitsMismatch) as mismatch:
            c.acquire_semaphore(name, 3, owner="c")
        self.assertEqual((mismatch.exception.code, mismatch.exception.status), ("permits_mismatch", 409))
        status = c.inspect_semaphore(name, 2)
        self.assertEqual((status.permits, status.held), (2, 2))
        self.assertEqual([h.owner for h in status.holders], ["a", "b"] if a.slot == 1 else ["b", "a"])
        self.assertFalse(c.inspect(name).held)  # lock "x" is not semaphore "x"
        extended = c.extend_semaphore(name, b.token, ttl=60)
        self.assertEqual((extended.ttl, extended.slot, extended.fence), ("1m0s", b.slot, b.fence))

        # The third caller waits; a's release gives it a's slot.
        releaser = threading.Timer(0.3, c.release_semaphore, args=(name, a.token))
        releaser.start()
        self.addCleanup(releaser.join)
        with c.semaphore(name, 2, wait="10s", owner="c", hold=True) as third:
            self.assertEqual((third.permits, third.slot), (2, a.slot))
            self.assertGreater(third.fence, a.fence)  # the slot's fence grows
            self.assertEqual(c.inspect_semaphore(name, 2).held, 2)
        with c.semaphore(name, 2, ttl="30s", owner="d") as kept:  # heartbeats, then a release, to the semaphore
            self.assertEqual(kept.slot, a.slot)
        self.assertEqual(c.inspect_semaphore(name, 2).held, 1)
        c.release_semaphore(name, b.token)
        self.assertEqual(c.inspect_semaphore(name, 2), type(status)(name, 2, 0, ()))

    def test_rwlock_readers_share_and_a_writer_excludes(self) -> None:
        c, name = self.client, unique("rwlock")
        a = c.acquire_rwlock(name, "shared", ttl="30s", owner="a")
        b = c.acquire_rwlock(name, "shared", ttl="30s", owner="b")
        self.assertEqual((a.mode, b.mode, a.fence, b.fence), ("shared", "shared", 0, 0))
        self.assertNotEqual(a.slot, b.slot)
        with self.assertRaises(LockHeld):
            c.acquire_rwlock(name, "exclusive", owner="w")
        with self.assertRaises(InvalidRequest) as bad:
            c.acquire_rwlock(name, "read")  # type: ignore[arg-type]
        self.assertEqual(bad.exception.code, "invalid_mode")
        status = c.inspect_rwlock(name)
        self.assertEqual((status.writer, status.reader_count), (None, 2))
        self.assertEqual(sorted((r.slot, r.owner) for r in status.readers), sorted([(a.slot, "a"), (b.slot, "b")]))
        self.assertFalse(c.inspect(name).held)  # lock "x" is not read/write lock "x"
        extended = c.extend_rwlock(name, b.token, ttl=60)
        self.assertEqual((extended.ttl, extended.slot, extended.mode), ("1m0s", b.slot, "shared"))

        # The writer waits for both readers to go.
        def release_readers() -> None:
            c.release_rwlock(name, a.token)
            c.release_rwlock(name, b.token)
        releaser = threading.Timer(0.3, release_readers)
        releaser.start()
        self.addCleanup(releaser.join)
        with c.rwlock(name, "exclusive", wait="10s", owner="w", hold=True) as writer:
            self.assertEqual((writer.mode, writer.slot), ("exclusive", None))
            self.assertGreater(writer.fence, 0)
            status = c.inspect_rwlock(name)
            self.assertEqual((status.writer and status.writer.owner, status.writer and status.writer.fence),
                             ("w", writer.fence))
            self.assertEqual(status.readers, ())
            with self.assertRaises(LockHeld):
                c.acquire_rwlock(name, "shared")
        with c.rwlock(name, "shared", ttl="30s", owner="d") as kept:  # heartbeats, then a release, to the rwlock
            self.assertEqual(kept.mode, "shared")
            self.assertEqual(c.inspect_rwlock(name).reader_count, 1)
        self.assertEqual(c.inspect_rwlock(name), RWLockStatus(name))
        with self.assertRaises(LeaseGone):
            c.release_rwlock(name, a.token)

    def test_lockset_is_all_or_nothing(self) -> None:
        c, base = self.client, unique("lockset")
        a, b, x = f"{base}/a", f"{base}/b", f"{base}/x"
        lease = c.acquire_lockset([b, a], ttl="30s", owner="set")  # any order: the set is a,b
        self.assertEqual((lease.name, [lock.name for lock in lease.locks], lease.fence), (f"{a},{b}", [a, b], 0))
        self.assertEqual(lease.valid_until, min(lock.valid_until for lock in lease.locks))
        for lock in lease.locks:  # each an ordinary lock, with its own fence
            status = c.inspect(lock.name)
            self.assertEqual((status.held, status.owner, status.fence), (True, "set", lock.fence))
        with self.assertRaises(LockHeld):
            c.acquire_lockset(f"{x},{b}")
        self.assertFalse(c.inspect(x).held)  # refused whole: x was not kept
        status = c.inspect_lockset(f"{x},{b}")
        self.assertEqual((status.name, status.held, [s.held for s in status.locks]), (f"{b},{x}", 1, [True, False]))
        extended = c.extend_lockset(f"{b},{a}", lease.token, ttl=60)
        self.assertEqual((extended.ttl, [lock.fence for lock in extended.locks]), ("1m0s", [lock.fence for lock in lease.locks]))
        with self.assertRaises(InvalidRequest) as bad:
            c.acquire_lockset([a, a])
        self.assertEqual(bad.exception.code, "invalid_name")

        # An overlapping set waits, held over a stream, until a,b is released.
        releaser = threading.Timer(0.3, c.release_lockset, args=([a, b], lease.token))
        releaser.start()
        self.addCleanup(releaser.join)
        with c.lockset([x, b], wait="10s", owner="held", hold=True) as held:
            self.assertEqual((held.name, held.fence, [lock.name for lock in held.locks]), (f"{b},{x}", 0, [b, x]))
            self.assertGreater(held.locks[0].fence, lease.locks[1].fence)  # b's fence grows
            self.assertEqual(c.inspect_lockset([b, x]).held, 2)
        self.assertEqual(c.inspect_lockset([b, x]).held, 0)
        with c.lockset(f"{a},{x}", ttl="30s") as kept:  # heartbeats, then a release, to the set
            self.assertEqual((kept.name, c.inspect_lockset([a, x]).held), (f"{a},{x}", 2))
        self.assertEqual(c.inspect_lockset([a, x]).held, 0)
        with self.assertRaises(LeaseGone):
            c.release_lockset([a, b], lease.token)

    def test_a_kept_lockset_is_lost_when_one_lock_ends(self) -> None:
        c, base = self.client, unique("lockset-lost")
        for hold in (True, False):
            with self.subTest(hold=hold):
                reasons: List[str] = []
                kept = c.lockset([f"{base}/a", f"{base}/b"], ttl="2s", hold=hold, on_lost=reasons.append)
                c.release(f"{base}/b", kept.token)  # the set's token ends the set through one of its locks
                self.assertTrue(kept.lost.wait(10), "lost never set")
                self.assertIn(kept.lost_reason, ("released", "lease_gone"))
                self.assertEqual(reasons, [kept.lost_reason])
                self.assertFalse(c.inspect(f"{base}/a").held)
                kept.release()  # ended already: nothing to do, no error

    def test_watch_sees_acquired_then_released(self) -> None:
        c, name = self.client, unique("watch")
        with c.watch(name) as watch:
            changes = self.changes_of(watch)
            first = next(changes, None)
            self.assertEqual((first and first.kind, first and first.held), ("state", False))
            lease = c.acquire(name, ttl="30s", owner="w")
            acquired = next(changes, None)
            self.assertIsNotNone(acquired)
            self.assertEqual((acquired.kind, acquired.held, acquired.owner, acquired.fence),
                             ("acquired", True, "w", lease.fence))
            self.assertIsNotNone(acquired.since)
            c.release(name, lease.token)
            released = next(changes, None)
            self.assertEqual((released and released.kind, released and released.reason), ("released", "released"))

    def test_a_standby_takes_over_when_the_leaders_stream_closes(self) -> None:
        c, name = self.client, unique("leader")
        self.assertIsNone(c.leader(name))
        leader = subprocess.Popen(
            [sys.executable, "-c", "import sys, time\nfrom sidelock import Client\n"
             "term = Client().campaign(sys.argv[1], owner='a')\nprint(term.fence, flush=True)\ntime.sleep(60)\n", name],
            stdout=subprocess.PIPE, text=True)
        self.addCleanup(leader.stdout.close)
        self.addCleanup(leader.wait)
        self.addCleanup(leader.kill)
        first_term = int(leader.stdout.readline())
        self.assertEqual(c.leader(name), "a")

        terms: List[KeptLock] = []
        standby = threading.Thread(target=lambda: terms.append(c.campaign(name, owner="b", wait="20s")))
        standby.start()
        self.assertEqual(c.leader(name), "a")  # b waits in the queue meanwhile
        killed = time.monotonic()
        leader.kill()  # its stream closes with it: the sidecar releases at once
        standby.join(10)
        self.assertFalse(standby.is_alive(), "the standby was not elected")
        took = time.monotonic() - killed
        with terms[0] as term:
            self.assertLess(took, 5)
            self.assertGreater(term.fence, first_term)  # a new term
            self.assertEqual(c.leader(name), "b")
        self.assertIsNone(c.leader(name))  # resigned

    def changes_of(self, watch: Watch) -> Iterator[Change]:
        """The changes of watch, which a guard closes after 10 s so that a
        missing change fails the test instead of hanging it."""
        guard = threading.Timer(10, watch.close)
        guard.start()
        self.addCleanup(guard.cancel)
        return iter(watch)


if __name__ == "__main__":
    unittest.main()
