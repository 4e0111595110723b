// The npm `eventsource` client (a WHATWG EventSource) holding a lock with
// POST ?hold=true, as issue 16 (finding 3) tried it: standard SSE clients
// reconnect on their own when a stream ends, so the sidecar must make the
// reconnect harmless. After max_hold ends the lease, the client's
// reconnect (with Last-Event-ID, after the stream's retry) gets 204 and
// the client stops: it never takes the lock again behind its caller's back.
// @ts-check
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { EventSource } from 'eventsource';

const baseUrl = process.env.SIDELOCK_URL;
if (!baseUrl) throw new Error('SIDELOCK_URL must name the lock API (the Go test sets it)');

// ttl=3s renews about every second; max_hold=8s ends the lease after ~8 s
// of renewals, the watch of the issue ("21 renewed events in 8 s carried
// 14 distinct valid_until").
const name = `sse/eventsource-${process.pid}`;
const holdURL = `${baseUrl}/locks/${encodeURIComponent(name)}?hold=true&ttl=3s&max_hold=8s`;
const eventNames = ['acquired', 'renewed', 'expiring', 'released', 'lost'];
// Bounds of the whole watch: max_hold plus generous slack for a busy machine.
const watchTimeoutMs = 30_000;

/**
 * @typedef {{ name: string, id: string, data: any, at: number }} Seen
 * @typedef {{ at: number, status: number, lastEventId: string | null }} Attempt
 */

/**
 * Holds the lock with EventSource until the client gives up for good.
 * @returns {Promise<{ events: Seen[], attempts: Attempt[], closedWith: any }>}
 */
function holdUntilTheClientStops() {
  /** @type {Seen[]} */
  const events = [];
  /** @type {Attempt[]} */
  const attempts = [];
  return new Promise((resolve, reject) => {
    const es = new EventSource(holdURL, {
      // EventSource always GETs; a custom fetch sends POST, as the
      // eventsource package (v3) allows.
      fetch: async (url, init) => {
        const headers = new Headers(init?.headers);
        const res = await fetch(url, { ...init, method: 'POST' });
        attempts.push({ at: Date.now(), status: res.status, lastEventId: headers.get('Last-Event-ID') });
        return res;
      },
    });
    const timer = setTimeout(() => { es.close(); reject(new Error(`the client was still going after ${watchTimeoutMs} ms: ${JSON.stringify(attempts)}`)); }, watchTimeoutMs);
    for (const eventName of eventNames) {
      es.addEventListener(eventName, (ev) => {
        const msg = /** @type {MessageEvent} */ (ev);
        events.push({ name: eventName, id: msg.lastEventId, data: JSON.parse(msg.data), at: Date.now() });
      });
    }
    es.addEventListener('error', (err) => {
      if (es.readyState === es.CLOSED) {
        clearTimeout(timer);
        resolve({ events, attempts, closedWith: err });
      }
    });
  });
}

test('eventsource with POST ?hold=true: after lost, the reconnect gets 204 and nothing is re-acquired', async () => {
  const { events, attempts, closedWith } = await holdUntilTheClientStops();

  assert.deepEqual(attempts.map((a) => a.status), [200, 204], 'one grant, then one reconnect answered 204');
  assert.equal(/** @type {any} */ (closedWith).code, 204, 'the client stopped because of the 204');
  assert.equal(events.filter((e) => e.name === 'acquired').length, 1, 'exactly one grant on the stream');
  const last = events[events.length - 1];
  assert.equal(last.name, 'lost');
  assert.equal(last.data.reason, 'max_hold');

  for (const e of events) assert.match(e.id, /^\d+$/, `event ${e.name} has an id`);
  assert.equal(attempts[1].lastEventId, last.id, 'the reconnect carried the last id seen');
  // retry: 1000 is honoured: the reconnect came after it, not at once.
  const waited = attempts[1].at - last.at;
  assert.ok(waited >= 900, `reconnected ${waited} ms after the stream ended, before its retry of 1000 ms`);

  const renewed = events.filter((e) => e.name === 'renewed');
  assert.ok(renewed.length >= 3, `renewed events over ~8 s with ttl=3s: ${renewed.length}`);
  const validUntil = renewed.map((e) => e.data.valid_until);
  assert.equal(new Set(validUntil).size, validUntil.length, `no two renewed events carry the same valid_until: ${validUntil}`);

  // The lock stayed free: someone else gets it at once.
  const res = await fetch(`${baseUrl}/locks/${encodeURIComponent(name)}?ttl=5s`, { method: 'POST' });
  assert.equal(res.status, 200, 'the lock is free after the client stopped');
  const lease = await res.json();
  const del = await fetch(`${baseUrl}/locks/${encodeURIComponent(name)}`, { method: 'DELETE', headers: { 'Lock-Token': lease.token } });
  assert.equal(del.status, 204);
});
