// A TypeScript program typed against the client openapi-typescript generates
// from httpapi/openapi.json (gen/sidelock.d.ts), compiled by `tsc --strict`
// (tsconfig.typed.json, skipLibCheck off) into gen/typed.test.mjs, which the
// Go harness runs against the real sidecar (issue 31, point 4). It acquires a
// lock, reads its token and fence, extends and releases it: no cast, no
// narrowing by hand. openapi-fetch's second type argument keeps the JSON
// answers (application/json, application/problem+json): POST /locks/{name}
// also answers text/event-stream (hold=true),
// which a client that never asks for it leaves out.
import assert from "node:assert/strict";
import { test } from "node:test";
import createClient from "openapi-fetch";
import type { paths } from "./gen/sidelock.js";

const baseUrl = process.env.SIDELOCK_URL;
if (!baseUrl) throw new Error("SIDELOCK_URL must name the lock API (the Go test sets it)");
const client = createClient<paths, `${string}/json`>({ baseUrl });

test("a typed client acquires, reads token and fence, extends and releases", async () => {
  const path = { name: "typed/orders/42" };
  const acquired = await client.POST("/locks/{name}", { params: { path, query: { ttl: "30s", owner: "typed" } } });
  if (!acquired.data) throw new Error(`acquire answered ${acquired.response.status}`);
  const token: string = acquired.data.token;
  const fence: number = acquired.data.fence;
  assert.match(token, /^[0-9a-f]{32}$/);
  assert.ok(fence > 0, "a lock's grant has a fence");

  const extended = await client.PUT("/locks/{name}", { params: { path, header: { "Lock-Token": token } } });
  if (!extended.data) throw new Error(`extend answered ${extended.response.status}`);
  assert.equal(extended.data.fence, fence);
  assert.ok(Date.parse(extended.data.valid_until) >= Date.parse(acquired.data.valid_until));

  const released = await client.DELETE("/locks/{name}", { params: { path, header: { "Lock-Token": token } } });
  assert.equal(released.response.status, 204);

  const again = await client.DELETE("/locks/{name}", { params: { path, header: { "Lock-Token": token } } });
  assert.equal(again.response.status, 410, "the token released is gone");
});
