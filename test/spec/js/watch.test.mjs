// The npm `eventsource` client (a WHATWG EventSource, which GETs) watching
// a lock with GET /locks/{name}?watch=true, as a leader election's
// followers would: the state first, then a grant naming its owner, then
// its release; every event has an id, as standard clients resume by it.
// @ts-check
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventSource } from 'eventsource';

const baseUrl = process.env.SIDELOCK_URL;
if (!baseUrl) throw new Error('SIDELOCK_URL must name the lock API (the Go test sets it)');

const name = `sse/watched-${process.pid}`;
const lockURL = `${baseUrl}/locks/${encodeURIComponent(name)}`;
const watchEvents = ['state', 'acquired', 'released', 'unavailable'];
const eventTimeoutMs = 10_000;

/**
 * @typedef {{ name: string, id: string, data: any }} Seen
 */

/**
 * Watches the lock; next() resolves with the next event in order.
 * @returns {{ next: () => Promise<Seen>, close: () => void }}
 */
function watchLock() {
  /** @type {Seen[]} */
  const queue = [];
  /** @type {((e: Seen) => void)[]} */
  const waiting = [];
  const es = new EventSource(`${lockURL}?watch=true`);
  for (const eventName of watchEvents) {
    es.addEventListener(eventName, (ev) => {
      const msg = /** @type {MessageEvent} */ (ev);
      const seen = { name: eventName, id: msg.lastEventId, data: JSON.parse(msg.data) };
      const w = waiting.shift();
      if (w) w(seen); else queue.push(seen);
    });
  }
  const next = () => {
    const queued = queue.shift();
    if (queued) return Promise.resolve(queued);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no watch event within ${eventTimeoutMs} ms`)), eventTimeoutMs);
      waiting.push((e) => { clearTimeout(timer); resolve(e); });
    });
  };
  return { next, close: () => es.close() };
}

test('eventsource watching a lock: state, then acquired with the owner, then released', async () => {
  const watch = watchLock();
  try {
    const state = await watch.next();
    assert.equal(state.name, 'state');
    assert.equal(state.data.held, false);

    const res = await fetch(`${lockURL}?ttl=10s&owner=eventsource-leader`, { method: 'POST' });
    assert.equal(res.status, 200);
    const lease = await res.json();
    const acquired = await watch.next();
    assert.equal(acquired.name, 'acquired');
    assert.equal(acquired.data.owner, 'eventsource-leader');
    assert.equal(acquired.data.fence, lease.fence, 'the watched fence is the holder\'s');

    const del = await fetch(lockURL, { method: 'DELETE', headers: { 'Lock-Token': lease.token } });
    assert.equal(del.status, 204);
    const released = await watch.next();
    assert.equal(released.name, 'released');
    assert.equal(released.data.reason, 'released');

    assert.deepEqual([state, acquired, released].map((e) => Number(e.id)), [1, 2, 3], 'ids number the events');
  } finally {
    watch.close();
  }
});
