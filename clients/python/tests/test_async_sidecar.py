"""The asyncio client against a real sidecar at $SIDELOCK_ADDR
(clients_test.go starts one over three real redis-server masters): the
blocking client's promises, awaited."""

import asyncio
import os
import unittest
import uuid
from typing import List

from sidelock import AsyncClient, Client, InvalidRequest, LeaseGone, LockHeld, PermitsMismatch, Unreachable
from sidelock.times import now


def unique(prefix: str) -> str:
    """A lock name of this test alone."""
    return f"py-async/{prefix}/{uuid.uuid4().hex[:12]}"


@unittest.skipUnless(os.environ.get("SIDELOCK_ADDR"), "needs a sidecar at $SIDELOCK_ADDR")
class AsyncSidecarTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.client = AsyncClient(timeout=10)

    async def asyncTearDown(self) -> None:
        await self.client.aclose()

    async def test_acquire_inspect_extend_release(self) -> None:
        c, name = self.client, unique("basic")
        lease = await c.acquire(name, ttl="30s", owner="py-async")
        self.assertEqual((lease.name, lease.owner, len(lease.token)), (name, "py-async", 32))
        self.assertGreater(lease.fence, 0)
        status = await c.inspect(name)
        self.assertEqual((status.held, status.owner, status.fence), (True, "py-async", lease.fence))
        with self.assertRaises(LockHeld) as held:
            await c.acquire(name)
        self.assertEqual((held.exception.code, held.exception.status), ("lock_held", 409))
        extended = await c.extend(name, lease.token, ttl=60)
        self.assertEqual((extended.ttl, extended.fence), ("1m0s", lease.fence))
        await c.release(name, lease.token)
        self.assertFalse((await c.inspect(name)).held)
        with self.assertRaises(LeaseGone):
            await c.release(name, lease.token)
        with self.assertRaises(InvalidRequest) as bad:
            await c.acquire("orders/../42")
        self.assertEqual(bad.exception.code, "invalid_name")

    async def test_an_unreachable_sidecar_is_unreachable(self) -> None:
        async with AsyncClient("http://127.0.0.1:9", timeout=2) as down:
            with self.assertRaises(Unreachable):
                await down.inspect("x")

    async def test_a_kept_lock_outlives_its_ttl_and_is_released_at_the_blocks_end(self) -> None:
        c, name = self.client, unique("heartbeat")
        with self.assertRaises(RuntimeError):
            async with c.lock(name, ttl="2s") as lock:
                first = lock.valid_until
                await asyncio.sleep(3.5)  # past the ttl: only the heartbeat task keeps it
                self.assertTrue(lock.valid(), lock.lost_reason)
                self.assertGreater(lock.valid_until, first)
                extended = await lock.extend(ttl="30s")
                self.assertEqual((extended.ttl, lock.lease), ("30s", extended))
                raise RuntimeError("the work failed")
        self.assertFalse((await c.inspect(name)).held)
        self.assertFalse(lock.lost.is_set())  # released, not lost

    async def test_a_held_lock_is_lost_at_max_hold(self) -> None:
        c, name = self.client, unique("hold")
        reasons: List[str] = []
        held = await c.lock(name, hold=True, max_hold="2s", on_lost=reasons.append)
        self.assertGreater(held.valid_until, now())
        self.assertTrue((await c.inspect(name)).held)
        await asyncio.wait_for(held.lost.wait(), 15)
        self.assertEqual((held.lost_reason, reasons), ("max_hold", ["max_hold"]))
        self.assertFalse(held.valid())
        await held.release()  # nothing to give up, no error
        self.assertFalse((await c.inspect(name)).held)

    async def test_kinds_semaphore_rwlock_lockset(self) -> None:
        c = self.client
        sem = unique("semaphore")
        a = await c.acquire_semaphore(sem, 1, ttl="30s")
        with self.assertRaises(PermitsMismatch):
            await c.acquire_semaphore(sem, 2)
        self.assertEqual((await c.inspect_semaphore(sem, 1)).held, 1)
        await c.release_semaphore(sem, a.token)
        async with c.rwlock(unique("rw"), "shared", ttl="30s") as reader:
            self.assertEqual(reader.mode, "shared")
            self.assertEqual((await c.inspect_rwlock(reader.name)).reader_count, 1)
        names = [unique("set-a"), unique("set-b")]
        async with c.lockset(names, ttl="30s", hold=True) as kept:
            self.assertEqual(sorted(lock.name for lock in kept.locks), sorted(names))
            self.assertEqual((await c.inspect_lockset(names)).held, 2)
        self.assertEqual((await c.inspect_lockset(names)).held, 0)

    async def test_a_watch_sees_a_campaign_win(self) -> None:
        c, name = self.client, unique("leader")
        async with c.watch(name) as watch:
            changes = watch.__aiter__()
            self.assertEqual((await changes.__anext__()).kind, "state")
            term = await c.campaign(name, owner="candidate-a", wait="5s")
            acquired = await asyncio.wait_for(changes.__anext__(), 10)
            self.assertEqual((acquired.kind, acquired.owner, acquired.fence), ("acquired", "candidate-a", term.fence))
            self.assertEqual(await c.leader(name), "candidate-a")
            await term.release()
            released = await asyncio.wait_for(changes.__anext__(), 10)
            self.assertEqual((released.kind, released.held), ("released", False))

    async def test_blocking_and_asyncio_clients_see_the_same_lock(self) -> None:
        name = unique("both")
        async with self.client.lock(name, ttl="30s") as lock:
            with Client() as blocking:
                self.assertEqual(blocking.inspect(name).fence, lock.fence)


if __name__ == "__main__":
    unittest.main()
