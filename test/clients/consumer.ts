// A TypeScript program that uses the Node client as an app would, checked by
// `tsc --strict` with skipLibCheck off (make clients-test) twice: with
// @types/node (tsconfig.json) and with only lib es2022 + dom, no esnext
// (tsconfig.dom.json): the client's index.d.ts must type-check in a
// consumer's build, not only in ours.
import { Client, LockHeld, type KeptLock, type Lease } from "sidelock";

export async function main(): Promise<void> {
  const client = new Client({ timeoutMs: 5000 });
  const lease: Lease = await client.acquire("orders/42", { ttl: "30s" });
  const fence: number = lease.fence;
  await client.release("orders/42", lease.token);
  const kept: KeptLock = await client.lock("orders/43", { hold: true });
  try {
    const renewed: Lease = await kept.extend("1m");
    console.log(fence, renewed.validUntil.toISOString(), kept.valid(), kept.signal.aborted);
  } finally {
    await kept.release();
  }
  try {
    await client.withLock("orders/44", {}, async (lock: KeptLock) => lock.fence);
  } catch (e) {
    if (e instanceof LockHeld) console.log(e.retryAfterMs);
  }
  for await (const change of client.watch("orders/42", { signal: AbortSignal.timeout(10) })) console.log(change.kind);
  await client.close();
}
