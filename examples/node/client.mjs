// The Node client as installed (npm install sidelock): a lock kept alive
// while the work runs, extended once, released at the end. Talks to
// $SIDELOCK_ADDR (default http://127.0.0.1:7420); the install test runs it
// from an empty npm project against a real sidecar.
import { createRequire } from "node:module";
import { Client } from "sidelock";

const { version } = createRequire(import.meta.url)("sidelock/package.json");
const client = new Client();
let kept;
await client.withLock("examples/client-node", { ttl: "30s", wait: "10s", owner: "example" }, async (lock) => {
  kept = lock;
  const lease = await lock.extend("60s");
  console.log(`sidelock ${version}: holding ${lock.name}, fence ${lock.fence}, ttl ${lease.ttl}`);
});
console.log("released:", kept.released);
await client.close();
