// Units that need no sidecar: durations, paths, events, errors; and the
// client's own logic (a watch reconnecting, a campaign retrying) against a
// scripted server.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";

import {
  Client,
  durationMs,
  errorFor,
  goDuration,
  InvalidRequest,
  LockHeld,
  lockPath,
  lockSetPath,
  NoQuorum,
  Overloaded,
  parseChange,
  PermitsMismatch,
  readEvents,
  rwlockPath,
  semaphorePath,
  SetChanged,
  SidelockError,
  Unavailable,
} from "../index.js";

test("durations are sent as Go durations", () => {
  assert.equal(goDuration("1m30s"), "1m30s");
  assert.equal(goDuration(30), "30s");
  assert.equal(goDuration(1.5), "1500ms");
  assert.throws(() => goDuration(-1), TypeError);
});

test("Go durations read as milliseconds", () => {
  for (const [text, want] of [["30s", 30000], ["1m0s", 60000], ["1h0m0s", 3600000], ["1.5s", 1500], ["500ms", 500], ["0s", 0], ["2m3.5s", 123500]]) {
    assert.equal(durationMs(text), want, text);
  }
  for (const bad of ["30", "s", "1x", "1s2", ""]) assert.throws(() => durationMs(bad), TypeError, bad);
});

test("lock paths are one escaped segment that URL parsers leave alone", () => {
  assert.equal(lockPath("orders/42"), "/locks/orders%2F42");
  assert.equal(lockPath("a?b/c#d"), "/locks/a%3Fb%2Fc%23d");
  for (const name of ["orders/../42", "orders/./42", "../42"]) {
    assert.equal(new URL("http://h" + lockPath(name)).pathname, lockPath(name), name); // no segment removed
  }
  assert.throws(() => lockPath(".."), InvalidRequest);
  assert.equal(semaphorePath("a?b/c#d"), "/semaphores/a%3Fb%2Fc%23d");
  assert.throws(() => semaphorePath("."), InvalidRequest);
  assert.equal(rwlockPath("a?b/c#d"), "/rwlocks/a%3Fb%2Fc%23d");
  assert.throws(() => rwlockPath(".."), InvalidRequest);
  assert.equal(lockSetPath(["b/2", "a?1"]), "/locksets/b%2F2,a%3F1"); // each name one segment, joined by ","
  assert.equal(lockSetPath("b/2,a?1"), lockSetPath(["b/2", "a?1"]));
  assert.throws(() => lockSetPath(["a", ".."]), InvalidRequest);
});

test("the error class follows the code", () => {
  const e = errorFor(409, { code: "lock_held", detail: "held", retry_after_ms: 1500 });
  assert.ok(e instanceof LockHeld && e instanceof SidelockError);
  assert.deepEqual([e.code, e.status, e.detail, e.retryAfterMs, e.name], ["lock_held", 409, "held", 1500, "LockHeld"]);
  assert.ok(errorFor(503, { code: "no_quorum" }) instanceof NoQuorum);
  assert.ok(errorFor(503, { code: "no_quorum" }) instanceof Unavailable);
  assert.ok(errorFor(400, { code: "invalid_max_hold" }) instanceof InvalidRequest); // a code added later
  assert.equal(errorFor(418, { code: "teapot" }).constructor, SidelockError);
});

test("semaphore and watch codes", () => {
  const mismatch = errorFor(409, { code: "permits_mismatch" });
  assert.ok(mismatch instanceof PermitsMismatch && !(mismatch instanceof LockHeld)); // a caller's mistake, not a busy semaphore
  assert.ok(errorFor(429, { code: "too_many_watchers" }) instanceof Overloaded);
  assert.ok(errorFor(400, { code: "invalid_permits" }) instanceof InvalidRequest);
  const changed = errorFor(409, { code: "set_changed" });
  assert.ok(changed instanceof SetChanged && !(changed instanceof LockHeld)); // nothing is held: the same call may be made again
});

test("changes of a watch", () => {
  const t = "2026-01-01T10:00:09Z";
  const held = parseChange("state", { name: "x", held: true, owner: "a", fence: 3, valid_until: t, since: t });
  assert.deepEqual([held.kind, held.held, held.owner, held.fence, held.since.getTime()], ["state", true, "a", 3, Date.parse(t)]);
  const free = parseChange("state", { name: "x", held: false });
  assert.deepEqual([free.held, free.owner, free.fence, free.validUntil], [false, "", undefined, undefined]);
  const acquired = parseChange("acquired", { name: "x", owner: "b", fence: 4, valid_until: t, since: t });
  assert.deepEqual([acquired.held, acquired.owner, acquired.fence], [true, "b", 4]);
  assert.deepEqual([parseChange("released", { name: "x", reason: "expired" }).held, parseChange("released", { reason: "expired" }).reason], [false, "expired"]);
  const unknown = parseChange("unavailable", { name: "x", detail: "no quorum" });
  assert.deepEqual([unknown.held, unknown.detail], [undefined, "no quorum"]);
});

test("the event stream format is read across chunk boundaries", async () => {
  const chunks = ["retry: 1000\n\n: a comment\nid: 1\nevent: acq", "uired\ndata: {\"a\":\ndata:1}\n\nid: 2\r\nevent: lost\r\n", "data: {}\r\n\r\nevent: cut\ndata: x\n"];
  const body = new ReadableStream({
    start(c) {
      for (const s of chunks) c.enqueue(new TextEncoder().encode(s));
      c.close();
    },
  });
  const events = [];
  const retries = [];
  for await (const e of readEvents(body, { onRetry: (ms) => retries.push(ms) })) events.push(e);
  assert.deepEqual(events, [{ event: "acquired", data: "{\"a\":\n1}", id: "1" }, { event: "lost", data: "{}", id: "2" }]);
  assert.deepEqual(retries, [1000]);
});

// The scripted tests have a timeout: a watch that misses its end would
// hang instead of failing.
test("a broken watch stream is reconnected with the last event id", { timeout: 5000 }, async (t) => {
  const server = await scripted(t, [
    stream('retry: 20\n\nid: 1\nevent: state\ndata: {"name":"a/b","held":false}\n\nid: 2\nevent: acquired\ndata: {"name":"a/b","owner":"x","fence":5}\n\n'),
    problem(503, "no_quorum", { retry_after_ms: 30 }), // the sidecar cannot serve yet: tried again
    stream('retry: 20\n\nid: 3\nevent: state\ndata: {"name":"a/b","held":true,"owner":"x","fence":5}\n\nid: 4\nevent: released\ndata: {"name":"a/b","reason":"released"}\n\n', { keepOpen: true }),
  ]);
  const seen = [];
  for await (const change of new Client({ baseUrl: server.url, timeoutMs: 5000 }).watch("a/b")) {
    seen.push([change.kind, change.held, change.owner]);
    if (change.kind === "released") break;
  }
  assert.deepEqual(seen, [["state", false, ""], ["acquired", true, "x"], ["unavailable", undefined, ""], ["state", true, "x"], ["released", false, ""]]);
  assert.deepEqual(server.requests.map((r) => [r.method, r.url]), Array(3).fill(["GET", "/locks/a%2Fb?watch=true"]));
  assert.deepEqual(server.requests.map((r) => r.headers["last-event-id"]), [undefined, "2", "2"]);
});

test("a watch ends quietly when its signal aborts, and throws what a retry cannot mend", { timeout: 5000 }, async (t) => {
  const server = await scripted(t, [stream('id: 1\nevent: state\ndata: {"name":"x","held":false}\n\n', { keepOpen: true }), problem(400, "invalid_name")]);
  const client = new Client({ baseUrl: server.url, timeoutMs: 5000 });
  const abort = new AbortController();
  const seen = [];
  for await (const change of client.watch("x", { signal: abort.signal })) {
    seen.push(change.kind);
    abort.abort(); // stops the stream under the loop, which then ends
  }
  assert.deepEqual(seen, ["state"]);
  await assert.rejects(client.watch("x").next(), (e) => e instanceof InvalidRequest && e.code === "invalid_name");
  assert.equal(server.requests.length, 2); // the aborted watch was not reconnected
});

test("a campaign retries on LockHeld until its signal aborts", { timeout: 5000 }, async (t) => {
  const abort = new AbortController();
  const server = await scripted(t, [problem(409, "lock_held", { retry_after_ms: 1000 })], (n) => {
    if (n === 2) abort.abort(new Error("stopped")); // during the third attempt
  });
  const client = new Client({ baseUrl: server.url, timeoutMs: 5000 });
  await assert.rejects(client.campaign("jobs/leader", { owner: "me", wait: "1s", signal: abort.signal }), /stopped/);
  assert.equal(server.requests.length, 3);
  const url = new URL(server.requests[0].url, server.url);
  assert.deepEqual([server.requests[0].method, url.pathname], ["POST", "/locks/jobs%2Fleader"]);
  assert.deepEqual([url.searchParams.get("wait"), url.searchParams.get("owner"), url.searchParams.get("hold")], ["1s", "me", "true"]);
  await assert.rejects(client.campaign("jobs/leader", { wait: "1s" }), TypeError); // no owner: nobody would know who leads
  await assert.rejects(client.campaign("jobs/leader", { owner: "me", wait: 0 }), TypeError);
});

test("read/write lock calls go to /rwlocks with their mode", { timeout: 5000 }, async (t) => {
  const until = new Date(Date.now() + 30000).toISOString();
  const lease = { name: "books/42", token: "ab".repeat(16), owner: "r", ttl: "30s", acquired_at: until, lease_expires_at: until, valid_until: until };
  const server = await scripted(t, [
    json({ ...lease, mode: "shared", slot: 5 }),
    json({ ...lease, ttl: "20s", mode: "shared", slot: 5 }),
    json({ name: "books/42", writer: { owner: "w", fence: 9, valid_until: until }, readers: [], reader_count: 0, writer_waiting: false }),
    stream(`event: acquired\ndata: ${JSON.stringify({ ...lease, mode: "exclusive", fence: 9 })}\n\n`, { keepOpen: true }),
    noContent,
  ]);
  const client = new Client({ baseUrl: server.url, timeoutMs: 5000 });
  const reader = await client.acquireRWLock("books/42", "shared", { owner: "r", wait: "2s" });
  assert.deepEqual([reader.mode, reader.slot, reader.fence], ["shared", 5, 0]);
  assert.equal((await client.extendRWLock("books/42", reader.token, { ttl: 20 })).ttl, "20s");
  const status = await client.inspectRWLock("books/42");
  assert.deepEqual([status.writer.owner, status.writer.fence, status.readers, status.readerCount, status.writerWaiting], ["w", 9, [], 0, false]);
  await client.withRWLock("books/42", "exclusive", { hold: true }, async (writer) => {
    assert.deepEqual([writer.mode, writer.slot, writer.fence], ["exclusive", undefined, 9]);
  });
  assert.deepEqual(server.requests.map((r) => [r.method, r.url]), [
    ["POST", "/rwlocks/books%2F42?wait=2s&owner=r&mode=shared"],
    ["PUT", "/rwlocks/books%2F42?ttl=20s"],
    ["GET", "/rwlocks/books%2F42"],
    ["POST", "/rwlocks/books%2F42?hold=true&mode=exclusive"],
    ["DELETE", "/rwlocks/books%2F42"],
  ]);
});

test("lock set calls go to /locksets with each name escaped", { timeout: 5000 }, async (t) => {
  const t1 = new Date(Date.now() + 30000).toISOString();
  const t2 = new Date(Date.now() + 31000).toISOString();
  const lease = { name: "a/1,b", token: "ab".repeat(16), owner: "s", ttl: "30s", acquired_at: t1, lease_expires_at: t1, valid_until: t1 };
  const locks = [{ name: "a/1", fence: 3, valid_until: t1 }, { name: "b", fence: 4, valid_until: t2 }];
  const server = await scripted(t, [
    json({ ...lease, locks }),
    json({ ...lease, ttl: "20s", locks }),
    json({ name: "a/1,b", locks: [{ name: "a/1", held: true, owner: "s", fence: 3, valid_until: t1 }, { name: "b", held: false }], held: 1 }),
    stream(`event: acquired\ndata: ${JSON.stringify({ ...lease, locks })}\n\n`, { keepOpen: true }),
    noContent,
  ]);
  const client = new Client({ baseUrl: server.url, timeoutMs: 5000 });
  const set = await client.acquireLockSet(["b", "a/1"], { owner: "s", wait: "2s" });
  assert.deepEqual([set.name, set.fence, set.locks.map((l) => [l.name, l.fence, l.validUntil.getTime()])], ["a/1,b", 0, [["a/1", 3, Date.parse(t1)], ["b", 4, Date.parse(t2)]]]);
  assert.equal((await client.extendLockSet("b,a/1", set.token, { ttl: 20 })).ttl, "20s");
  const status = await client.inspectLockSet(["a/1", "b"]);
  assert.deepEqual([status.name, status.held, status.locks.map((l) => [l.name, l.held, l.fence])], ["a/1,b", 1, [["a/1", true, 3], ["b", false, undefined]]]);
  await client.withLockSet(["b", "a/1"], { hold: true }, async (held) => {
    assert.deepEqual([held.name, held.fence, held.locks.map((l) => l.fence)], ["a/1,b", 0, [3, 4]]);
  });
  assert.deepEqual(server.requests.map((r) => [r.method, r.url]), [
    ["POST", "/locksets/b,a%2F1?wait=2s&owner=s"],
    ["PUT", "/locksets/b,a%2F1?ttl=20s"],
    ["GET", "/locksets/a%2F1,b"],
    ["POST", "/locksets/b,a%2F1?hold=true"],
    ["DELETE", "/locksets/b,a%2F1"],
  ]);
});

// A scripted server on a free loopback port: the n-th request gets
// answers[n] (the last one once the script runs out), after onRequest(n).
async function scripted(t, answers, onRequest = () => {}) {
  const requests = [];
  const open = new Set();
  const server = createServer((req, res) => {
    const n = requests.push({ method: req.method, url: req.url, headers: req.headers }) - 1;
    onRequest(n);
    answers[Math.min(n, answers.length - 1)](res, open);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(async () => {
    for (const res of open) res.end();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: `http://127.0.0.1:${server.address().port}`, requests };
}

// An event stream's answer: ended after body (a broken stream), or kept
// open as a live one is until the test ends.
function stream(body, { keepOpen = false } = {}) {
  return (res, open) => {
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    if (keepOpen) {
      res.write(body);
      open.add(res);
    } else {
      res.write(body, () => res.destroy()); // no clean end: the connection breaks
    }
  };
}

function json(body) {
  return (res) => {
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify(body));
  };
}

function noContent(res) {
  res.writeHead(204);
  res.end();
}

function problem(status, code, extra = {}) {
  return (res) => {
    res.writeHead(status, { "Content-Type": "application/problem+json" });
    res.end(JSON.stringify({ code, status, ...extra }));
  };
}
