// The client against a real sidecar at $SIDELOCK_ADDR (clients_test.go
// starts one over three real redis-server masters).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { Client, IdempotencyMismatch, InvalidRequest, LeaseGone, LockHeld, LockLost, PermitsMismatch, Unreachable } from "../index.js";

const unique = (prefix) => `node/${prefix}/${randomUUID().slice(0, 12)}`;
const client = new Client({ timeoutMs: 10000 });

describe("against a sidecar", { skip: !process.env.SIDELOCK_ADDR && "needs a sidecar at $SIDELOCK_ADDR" }, () => {
  test("acquire, inspect, extend, release", async () => {
    const name = unique("basic");
    const lease = await client.acquire(name, { ttl: "30s", owner: "node-test" });
    assert.deepEqual([lease.name, lease.owner, lease.ttl, lease.token.length], [name, "node-test", "30s", 32]);
    assert.ok(lease.fence > 0 && Number.isSafeInteger(lease.fence));
    assert.ok(lease.validUntil.getTime() > Date.now());
    const status = await client.inspect(name);
    assert.deepEqual([status.held, status.owner, status.fence], [true, "node-test", lease.fence]);
    const extended = await client.extend(name, lease.token, { ttl: 60 });
    assert.deepEqual([extended.token, extended.ttl, extended.fence], [lease.token, "1m0s", lease.fence]);
    await client.release(name, lease.token);
    assert.equal((await client.inspect(name)).held, false);
    await assert.rejects(client.extend(name, lease.token), (e) => e instanceof LeaseGone && e.code === "lease_gone" && e.status === 410);
  });

  test("a held lock is LockHeld", async () => {
    const name = unique("conflict");
    const lease = await client.acquire(name, { ttl: "30s" });
    await assert.rejects(client.acquire(name), (e) => e instanceof LockHeld && e.status === 409 && e.detail !== "" && e.retryAfterMs > 0);
    await client.release(name, lease.token);
  });

  test("bad input is InvalidRequest", async () => {
    await assert.rejects(client.acquire("orders/../42"), (e) => e instanceof InvalidRequest && e.code === "invalid_name" && e.status === 400);
    await assert.rejects(client.acquire(unique("ttl"), { ttl: "soon" }), (e) => e instanceof InvalidRequest && e.code === "invalid_ttl");
    await assert.rejects(client.extend(unique("token"), "not-a-token"), (e) => e instanceof InvalidRequest && e.code === "invalid_token");
  });

  test("an unreachable sidecar is Unreachable", async () => {
    await assert.rejects(new Client({ baseUrl: "http://127.0.0.1:9", timeoutMs: 2000 }).inspect("x"), (e) => e instanceof Unreachable && e.status === 0);
  });

  test("an idempotent acquire returns the same lease", async () => {
    const name = unique("idem");
    const key = randomUUID();
    const first = await client.acquire(name, { ttl: "30s", idempotencyKey: key });
    const again = await client.acquire(name, { ttl: "30s", idempotencyKey: key });
    assert.equal(again.token, first.token);
    await assert.rejects(client.acquire(name, { ttl: "31s", idempotencyKey: key }), (e) => e instanceof IdempotencyMismatch && e.status === 422);
    await client.release(name, first.token);
  });

  test("a wait is granted when the holder releases", async () => {
    const name = unique("wait");
    const first = await client.acquire(name, { ttl: "30s" });
    const releasing = sleep(500).then(() => client.release(name, first.token));
    const started = Date.now();
    const second = await client.acquire(name, { wait: "20s" });
    const waited = Date.now() - started;
    await releasing;
    assert.ok(waited >= 400 && waited < 15000, `waited ${waited} ms`);
    assert.notEqual(second.token, first.token);
    assert.ok(second.fence > first.fence, "fences only grow");
    await client.release(name, second.token);
  });

  test("withLock releases when fn throws", async () => {
    const name = unique("scoped");
    let kept;
    await assert.rejects(
      client.withLock(name, { ttl: "30s" }, async (lock) => {
        kept = lock;
        assert.ok(lock.valid());
        assert.equal((await client.inspect(name)).held, true);
        throw new Error("the work failed");
      }),
      /the work failed/,
    );
    assert.equal((await client.inspect(name)).held, false);
    assert.equal(kept.signal.aborted, false, "released, not lost");
    const again = await client.acquire(name);
    await client.release(name, again.token);
  });

  test("Symbol.asyncDispose releases (what await using calls)", { skip: typeof Symbol.asyncDispose !== "symbol" && "no Symbol.asyncDispose" }, async () => {
    const name = unique("dispose");
    const lock = await client.lock(name, { ttl: "30s" });
    await lock[Symbol.asyncDispose]();
    assert.equal((await client.inspect(name)).held, false);
  });

  test("a scoped lock outlives its ttl", async () => {
    const name = unique("heartbeat");
    await client.withLock(name, { ttl: "2s" }, async (lock) => {
      const firstValidUntil = lock.validUntil;
      await sleep(5000); // two and a half ttls: only the heartbeats keep it
      assert.ok(lock.valid(), lock.lostReason);
      assert.ok(lock.validUntil > firstValidUntil);
      const status = await client.inspect(name);
      assert.deepEqual([status.held, status.fence], [true, lock.fence]);
      await assert.rejects(client.acquire(name), LockHeld);
    });
    assert.equal((await client.inspect(name)).held, false);
  });

  test("a scoped lock reports max_hold as lost", async () => {
    const name = unique("heartbeat-max-hold");
    const reasons = [];
    const lock = await client.lock(name, { ttl: "30s", maxHold: "2s", onLost: (r) => reasons.push(r) });
    await abortedWithin(lock.signal, 15000);
    assert.ok(["max_hold", "lease_gone"].includes(lock.lostReason), lock.lostReason);
    assert.deepEqual(reasons, [lock.lostReason]);
    assert.ok(lock.signal.reason instanceof LockLost);
    assert.equal(lock.valid(), false);
    await lock.release(); // gone already: no error
    assert.equal((await client.inspect(name)).held, false);
  });

  test("a held lock is kept without heartbeats", async () => {
    const name = unique("hold");
    await client.withLock(name, { hold: true, ttl: "2s" }, async (held) => {
      const firstValidUntil = held.validUntil;
      assert.equal(held.token.length, 32);
      assert.ok(held.fence > 0);
      await sleep(3000); // past the ttl: renewed by the sidecar while the stream is open
      assert.ok(held.valid(), held.lostReason);
      assert.ok(held.validUntil > firstValidUntil);
      await assert.rejects(client.acquire(name), LockHeld);
    });
    assert.equal((await client.inspect(name)).held, false);
  });

  test("a held lock lost at max_hold aborts its signal and is never taken again", async () => {
    const name = unique("hold-max-hold");
    const reasons = [];
    const held = await client.lock(name, { hold: true, maxHold: "2s", onLost: (r) => reasons.push(r) });
    assert.ok(held.lease.maxHoldAt instanceof Date);
    await abortedWithin(held.signal, 15000);
    assert.equal(held.lostReason, "max_hold");
    assert.equal(held.signal.reason.reason, "max_hold");
    assert.deepEqual(reasons, ["max_hold"]);
    assert.equal(held.valid(), false);
    await sleep(1500); // a reconnecting client would have taken it again by now
    assert.equal((await client.inspect(name)).held, false);
    const other = await client.acquire(name, { ttl: "30s" });
    assert.ok(other.fence > held.fence);
    await held.release(); // must not touch the new holder's lease
    assert.equal((await client.inspect(name)).fence, other.fence);
    await client.release(name, other.token);
  });

  test("a held lock waits for the holder; a caller's abort stops the wait", async () => {
    const name = unique("hold-wait");
    const first = await client.acquire(name, { ttl: "30s" });
    const abort = new AbortController();
    setTimeout(() => abort.abort(new Error("gave up")), 300);
    await assert.rejects(client.lock(name, { hold: true, wait: "20s", signal: abort.signal }), /gave up/);
    const releasing = sleep(300).then(() => client.release(name, first.token));
    const held = await client.lock(name, { hold: true, wait: "20s" });
    await releasing;
    assert.ok(held.fence > first.fence);
    await held.release();
    assert.equal((await client.inspect(name)).held, false);
  });

  test("a semaphore admits permits holders", async () => {
    const name = unique("semaphore");
    const a = await client.acquireSemaphore(name, 2, { ttl: "30s", owner: "a" });
    const b = await client.acquireSemaphore(name, 2, { ttl: "30s", owner: "b" });
    assert.deepEqual([a.permits, b.permits, [a.slot, b.slot].sort()], [2, 2, [1, 2]]);
    await assert.rejects(client.acquireSemaphore(name, 2, { owner: "c" }), (e) => e instanceof LockHeld && e.status === 409);
    await assert.rejects(client.acquireSemaphore(name, 3, { owner: "c" }), (e) => e instanceof PermitsMismatch && e.code === "permits_mismatch");
    const status = await client.inspectSemaphore(name, 2);
    assert.deepEqual([status.permits, status.held, status.holders.map((h) => h.owner)], [2, 2, a.slot === 1 ? ["a", "b"] : ["b", "a"]]);
    assert.equal((await client.inspect(name)).held, false, "lock x is not semaphore x");
    const extended = await client.extendSemaphore(name, b.token, { ttl: 60 });
    assert.deepEqual([extended.ttl, extended.slot, extended.fence], ["1m0s", b.slot, b.fence]);

    // The third caller waits; a's release gives it a's slot.
    const releasing = sleep(300).then(() => client.releaseSemaphore(name, a.token));
    await client.withSemaphore(name, 2, { wait: "10s", owner: "c", hold: true }, async (third) => {
      await releasing;
      assert.deepEqual([third.permits, third.slot], [2, a.slot]);
      assert.ok(third.fence > a.fence, "the slot's fence grows");
      assert.equal((await client.inspectSemaphore(name, 2)).held, 2);
    });
    await client.withSemaphore(name, 2, { ttl: "30s", owner: "d" }, async (kept) => assert.equal(kept.slot, a.slot)); // heartbeats, then a release, to the semaphore
    assert.equal((await client.inspectSemaphore(name, 2)).held, 1);
    await client.releaseSemaphore(name, b.token);
    assert.deepEqual(await client.inspectSemaphore(name, 2), { name, permits: 2, held: 0, holders: [] });
  });

  test("readers share a read/write lock, a writer excludes them", async () => {
    const name = unique("rwlock");
    const a = await client.acquireRWLock(name, "shared", { ttl: "30s", owner: "a" });
    const b = await client.acquireRWLock(name, "shared", { ttl: "30s", owner: "b" });
    assert.deepEqual([a.mode, b.mode, a.fence, b.fence], ["shared", "shared", 0, 0]);
    assert.notEqual(a.slot, b.slot);
    await assert.rejects(client.acquireRWLock(name, "exclusive", { owner: "w" }), (e) => e instanceof LockHeld && e.status === 409);
    await assert.rejects(client.acquireRWLock(name, "read"), (e) => e instanceof InvalidRequest && e.code === "invalid_mode");
    const status = await client.inspectRWLock(name);
    assert.deepEqual([status.writer, status.readerCount, status.writerWaiting], [undefined, 2, false]);
    const bySlot = (x, y) => x[0] - y[0];
    assert.deepEqual(status.readers.map((r) => [r.slot, r.owner]).sort(bySlot), [[a.slot, "a"], [b.slot, "b"]].sort(bySlot));
    assert.equal((await client.inspect(name)).held, false, "lock x is not read/write lock x");
    const extended = await client.extendRWLock(name, b.token, { ttl: 60 });
    assert.deepEqual([extended.ttl, extended.slot, extended.mode], ["1m0s", b.slot, "shared"]);

    // The writer waits for both readers to go.
    const releasing = sleep(300).then(async () => {
      await client.releaseRWLock(name, a.token);
      await client.releaseRWLock(name, b.token);
    });
    await client.withRWLock(name, "exclusive", { wait: "10s", owner: "w", hold: true }, async (writer) => {
      await releasing;
      assert.deepEqual([writer.mode, writer.slot], ["exclusive", undefined]);
      assert.ok(writer.fence > 0);
      const written = await client.inspectRWLock(name);
      assert.deepEqual([written.writer?.owner, written.writer?.fence, written.readers], ["w", writer.fence, []]);
      await assert.rejects(client.acquireRWLock(name, "shared"), LockHeld);
    });
    await client.withRWLock(name, "shared", { ttl: "30s", owner: "d" }, async (kept) => {
      // heartbeats, then a release, to the read/write lock
      assert.equal(kept.mode, "shared");
      assert.equal((await client.inspectRWLock(name)).readerCount, 1);
    });
    assert.deepEqual(await client.inspectRWLock(name), { name, writer: undefined, readers: [], readerCount: 0, writerWaiting: false });
    await assert.rejects(client.releaseRWLock(name, a.token), LeaseGone);
  });

  test("a lock set is all or nothing", async () => {
    const base = unique("lockset");
    const [a, b, x] = [`${base}/a`, `${base}/b`, `${base}/x`];
    const lease = await client.acquireLockSet([b, a], { ttl: "30s", owner: "set" }); // any order: the set is a,b
    assert.deepEqual([lease.name, lease.locks.map((l) => l.name), lease.fence], [`${a},${b}`, [a, b], 0]);
    assert.equal(lease.validUntil.getTime(), Math.min(...lease.locks.map((l) => l.validUntil.getTime())));
    for (const lock of lease.locks) {
      const status = await client.inspect(lock.name); // each an ordinary lock, with its own fence
      assert.deepEqual([status.held, status.owner, status.fence], [true, "set", lock.fence]);
    }
    await assert.rejects(client.acquireLockSet(`${x},${b}`), (e) => e instanceof LockHeld && e.status === 409);
    assert.equal((await client.inspect(x)).held, false, "refused whole: x was not kept");
    const status = await client.inspectLockSet(`${x},${b}`);
    assert.deepEqual([status.name, status.held, status.locks.map((l) => l.held)], [`${b},${x}`, 1, [true, false]]);
    const extended = await client.extendLockSet(`${b},${a}`, lease.token, { ttl: 60 });
    assert.deepEqual([extended.ttl, extended.locks.map((l) => l.fence)], ["1m0s", lease.locks.map((l) => l.fence)]);
    await assert.rejects(client.acquireLockSet([a, a]), (e) => e instanceof InvalidRequest && e.code === "invalid_name");

    // An overlapping set waits, held over a stream, until a,b is released.
    const releasing = sleep(300).then(() => client.releaseLockSet([a, b], lease.token));
    await client.withLockSet([x, b], { wait: "10s", owner: "held", hold: true }, async (held) => {
      await releasing;
      assert.deepEqual([held.name, held.fence, held.locks.map((l) => l.name)], [`${b},${x}`, 0, [b, x]]);
      assert.ok(held.locks[0].fence > lease.locks[1].fence, "b's fence grows");
      assert.equal((await client.inspectLockSet([b, x])).held, 2);
    });
    assert.equal((await client.inspectLockSet([b, x])).held, 0);
    await client.withLockSet(`${a},${x}`, { ttl: "30s" }, async (kept) => {
      // heartbeats, then a release, to the set
      assert.deepEqual([kept.name, (await client.inspectLockSet([a, x])).held], [`${a},${x}`, 2]);
    });
    assert.equal((await client.inspectLockSet([a, x])).held, 0);
    await assert.rejects(client.releaseLockSet([a, b], lease.token), LeaseGone);
  });

  for (const hold of [true, false]) {
    test(`a kept lock set is lost when one of its locks ends (hold ${hold})`, async () => {
      const base = unique("lockset-lost");
      const reasons = [];
      const kept = await client.lockSet([`${base}/a`, `${base}/b`], { ttl: "2s", hold, onLost: (r) => reasons.push(r) });
      await client.release(`${base}/b`, kept.token); // the set's token ends the set through one of its locks
      await abortedWithin(kept.signal, 10000);
      assert.ok(["released", "lease_gone"].includes(kept.lostReason), kept.lostReason);
      assert.deepEqual(reasons, [kept.lostReason]);
      assert.equal((await client.inspect(`${base}/a`)).held, false);
      await kept.release(); // ended already: no error
    });
  }

  test("a watch sees acquired then released", async () => {
    const name = unique("watch");
    const changes = client.watch(name, { signal: AbortSignal.timeout(10000) }); // a missing change fails instead of hanging
    try {
      const first = (await changes.next()).value;
      assert.deepEqual([first?.kind, first?.held], ["state", false]);
      const lease = await client.acquire(name, { ttl: "30s", owner: "w" });
      const acquired = (await changes.next()).value;
      assert.deepEqual([acquired?.kind, acquired?.held, acquired?.owner, acquired?.fence], ["acquired", true, "w", lease.fence]);
      assert.ok(acquired.since instanceof Date);
      await client.release(name, lease.token);
      const released = (await changes.next()).value;
      assert.deepEqual([released?.kind, released?.reason], ["released", "released"]);
    } finally {
      await changes.return();
    }
  });

  test("a standby takes over when the leader's stream closes", async (t) => {
    const name = unique("leader");
    assert.equal(await client.leader(name), undefined);
    const script = `import { Client } from ${JSON.stringify(new URL("../index.js", import.meta.url).href)};
      const term = await new Client().campaign(process.env.LEADER_NAME, { owner: "a" });
      console.log(term.fence);
      setInterval(() => {}, 1000); // leads until killed`;
    const leader = spawn(process.execPath, ["--input-type=module", "-e", script], { env: { ...process.env, LEADER_NAME: name }, stdio: ["ignore", "pipe", "inherit"] });
    t.after(() => leader.kill("SIGKILL"));
    const [line] = await once(createInterface({ input: leader.stdout }), "line");
    const firstTerm = Number(line);
    assert.equal(await client.leader(name), "a");

    const standby = client.campaign(name, { owner: "b", wait: "20s" });
    assert.equal(await client.leader(name), "a"); // b waits in the queue meanwhile
    const killed = Date.now();
    leader.kill("SIGKILL"); // its stream closes with it: the sidecar releases at once
    const term = await standby;
    try {
      assert.ok(Date.now() - killed < 5000, `took ${Date.now() - killed} ms`);
      assert.ok(term.fence > firstTerm, "a new term");
      assert.equal(await client.leader(name), "b");
    } finally {
      await term.release(); // resign
    }
    assert.equal(await client.leader(name), undefined);
  });
});

async function abortedWithin(signal, ms) {
  if (signal.aborted) return;
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`signal not aborted within ${ms} ms`)), ms);
    signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });
}
