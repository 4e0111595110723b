// Units that need no sidecar: durations, paths, events, errors.
import assert from "node:assert/strict";
import { test } from "node:test";

import { durationMs, errorFor, goDuration, InvalidRequest, LockHeld, lockPath, NoQuorum, readEvents, SidelockError, Unavailable } from "../index.js";

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

test("the event stream format is read across chunk boundaries", async () => {
  const chunks = ["retry: 1000\n\n: a comment\nid: 1\nevent: acq", "uired\ndata: {\"a\":\ndata:1}\n\nid: 2\r\nevent: lost\r\n", "data: {}\r\n\r\nevent: cut\ndata: x\n"];
  const body = new ReadableStream({
    start(c) {
      for (const s of chunks) c.enqueue(new TextEncoder().encode(s));
      c.close();
    },
  });
  const events = [];
  for await (const e of readEvents(body)) events.push(e);
  assert.deepEqual(events, [{ event: "acquired", data: "{\"a\":\n1}", id: "1" }, { event: "lost", data: "{}", id: "2" }]);
});
