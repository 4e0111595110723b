// `await using` releases a kept lock at the end of its block (TypeScript 5.2+,
// checked with @types/node's Symbol.asyncDispose).
import { Client } from "sidelock";

export async function scoped(client: Client): Promise<number> {
  await using lock = await client.lock("orders/45", { ttl: "30s" });
  return lock.fence;
}
