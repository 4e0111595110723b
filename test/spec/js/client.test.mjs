// A client generated from httpapi/openapi.json (openapi-typescript types,
// openapi-fetch requests) used as an app developer would: the README's own
// lock name orders/42 goes in the path parameter, which openapi-fetch
// escapes to orders%2F42 (issue 16, finding 2). `npm run typecheck` checks
// this file against the generated types (// @ts-check).
// @ts-check
import { test } from 'node:test';
import assert from 'node:assert/strict';
import createClient from 'openapi-fetch';

const baseUrl = process.env.SIDELOCK_URL;
if (!baseUrl) throw new Error('SIDELOCK_URL must name the lock API (the Go test sets it)');

/** @type {import('openapi-fetch').Client<import('./gen/sidelock.js').paths>} */
const client = createClient({ baseUrl });

/**
 * A JSON body, narrowed from the generated union. The spec lists
 * application/json (a Lease) and text/event-stream (hold=true) for one
 * 200 — and a Status and a watch's text/event-stream for the 200 of
 * GET /locks/{name} — and text/plain for 431 next to the problems, so the
 * generated types are `Lease | string`, `Status | string` and
 * `Problem | string`: a typed caller narrows them.
 * @template T
 * @param {T} data
 * @returns {Exclude<T, string | undefined>}
 */
function jsonBody(data) {
  assert.ok(data && typeof data === 'object', 'a JSON body, not an event stream');
  return /** @type {Exclude<T, string | undefined>} */ (data);
}

test('the generated client locks orders/42, extends, inspects and releases it', async () => {
  const path = { name: 'orders/42' };
  /** @type {string[]} */
  const sent = [];
  const record = { onRequest: (/** @type {{request: Request}} */ { request }) => { sent.push(request.url); } };
  client.use(record);
  try {
    const acquired = await client.POST('/locks/{name}', { params: { path, query: { ttl: '30s', owner: 'generated-client' } } });
    assert.equal(acquired.response.status, 200, JSON.stringify(acquired.error));
    const lease = jsonBody(acquired.data);
    assert.equal(lease.name, 'orders/42');
    assert.match(sent[0], /\/locks\/orders%2F42\?/, 'openapi-fetch escapes the slash of a path parameter');
    const token = lease.token ?? '';
    assert.match(token ?? '', /^[0-9a-f]{32}$/);

    const extended = await client.PUT('/locks/{name}', { params: { path, header: { 'Lock-Token': token } } });
    assert.equal(extended.response.status, 200, JSON.stringify(extended.error));
    assert.ok(extended.data);
    assert.ok(Date.parse(extended.data.valid_until) >= Date.parse(lease.valid_until), 'a fresh valid_until');

    const inspected = await client.GET('/locks/{name}', { params: { path } });
    assert.equal(inspected.response.status, 200, JSON.stringify(inspected.error));
    assert.equal(jsonBody(inspected.data).held, true);
    assert.equal(jsonBody(inspected.data).owner, 'generated-client');

    const released = await client.DELETE('/locks/{name}', { params: { path, header: { 'Lock-Token': token } } });
    assert.equal(released.response.status, 204, JSON.stringify(released.error));

    const after = await client.GET('/locks/{name}', { params: { path } });
    assert.equal(jsonBody(after.data).held, false);
  } finally {
    client.eject(record);
  }
});

test('a conflict is a typed 409 problem', async () => {
  const path = { name: 'orders/43' };
  const first = await client.POST('/locks/{name}', { params: { path, query: { ttl: '30s' } } });
  assert.equal(first.response.status, 200);
  try {
    const second = await client.POST('/locks/{name}', { params: { path } });
    assert.equal(second.response.status, 409);
    assert.equal(second.data, undefined);
    const problem = jsonBody(second.error);
    assert.equal(problem.code, 'lock_held');
    assert.equal(problem.status, 409);
    assert.equal(second.response.headers.get('content-type'), 'application/problem+json');
    assert.ok(Number(second.response.headers.get('retry-after')) >= 0);
  } finally {
    const token = jsonBody(first.data)?.token ?? '';
    const released = await client.DELETE('/locks/{name}', { params: { path, header: { 'Lock-Token': token } } });
    assert.equal(released.response.status, 204);
  }
});

test('the generated client takes, inspects and releases the permits of a semaphore', async () => {
  const path = { name: 'pools/reports' };
  /** @param {string} owner */
  const take = (owner) => client.POST('/semaphores/{name}', { params: { path, query: { permits: 2, ttl: '30s', owner } } });
  const first = await take('worker-1');
  const second = await take('worker-2');
  assert.equal(first.response.status, 200, JSON.stringify(first.error));
  assert.equal(second.response.status, 200, JSON.stringify(second.error));
  const permits = [jsonBody(first.data), jsonBody(second.data)];
  assert.deepEqual(permits.map((p) => p.permits), [2, 2]);
  assert.deepEqual(permits.map((p) => p.slot).sort(), [1, 2], 'two permits hold the two slots');
  try {
    const full = await take('worker-3');
    assert.equal(full.response.status, 409);
    assert.equal(jsonBody(full.error).code, 'lock_held');

    const other = await client.POST('/semaphores/{name}', { params: { path, query: { permits: 3 } } });
    assert.equal(other.response.status, 409);
    assert.equal(jsonBody(other.error).code, 'permits_mismatch');

    const inspected = await client.GET('/semaphores/{name}', { params: { path, query: { permits: 2 } } });
    assert.equal(inspected.response.status, 200, JSON.stringify(inspected.error));
    assert.equal(inspected.data?.held, 2);
    assert.deepEqual(inspected.data?.holders.map((h) => [h.slot, h.owner]),
      permits.map((p) => [p.slot, p.owner]).sort((a, b) => Number(a[0]) - Number(b[0])));
  } finally {
    for (const p of permits) {
      const released = await client.DELETE('/semaphores/{name}', { params: { path, header: { 'Lock-Token': p.token ?? '' } } });
      assert.equal(released.response.status, 204);
    }
  }
  const after = await client.GET('/semaphores/{name}', { params: { path, query: { permits: 2 } } });
  assert.equal(after.data?.held, 0);
  assert.deepEqual(after.data?.holders, []);
});
