// Issue 30's Node row: one Node process's acquire+release pairs of
// distinct names, either through a sidelock sidecar over undici's
// keep-alive Pool, or with node-redlock (4.2.0, over ioredis) in-process
// on the same masters. Prints one JSON line: p50 (µs) of a sequential
// caller's pairs, and pairs/s with 64 callers.
//
//   node bench.mjs sidelock http://127.0.0.1:PORT
//   node bench.mjs redlock 127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
import { Pool } from "undici";
import Redis from "ioredis";
import Redlock from "redlock";

const [mode, target, seqArg, parArg] = process.argv.slice(2);
const sequential = Number(seqArg || 2000);
const parallelPairs = Number(parArg || 6000);
const callers = 64;

let pair, close;
let overloaded = 0;
if (mode === "sidelock") {
  const pool = new Pool(target, { connections: callers, pipelining: 1 });
  pair = async (name) => {
    let a, body;
    for (;;) {
      a = await pool.request({ path: `/locks/${name}?ttl=10s`, method: "POST" });
      body = await a.body.json();
      if (a.statusCode !== 429) break;
      overloaded++; // the sidecar's own overload, named: back off as asked and try again
      await new Promise((r) => setTimeout(r, body.retry_after_ms));
    }
    if (a.statusCode !== 200) throw new Error(`acquire ${name}: ${a.statusCode} ${JSON.stringify(body)}`);
    const r = await pool.request({ path: `/locks/${name}`, method: "DELETE", headers: { "lock-token": body.token } });
    await r.body.dump();
    if (r.statusCode !== 204) throw new Error(`release ${name}: ${r.statusCode}`);
  };
  close = () => pool.close();
} else if (mode === "redlock") {
  const clients = target.split(",").map((a) => {
    const [host, port] = a.split(":");
    return new Redis({ host, port: Number(port), enableAutoPipelining: false });
  });
  const redlock = new Redlock(clients, { retryCount: 0, driftFactor: 0.01 });
  pair = async (name) => {
    const lock = await redlock.lock(`nodebench:${name}`, 10000);
    await lock.unlock();
  };
  close = () => Promise.all(clients.map((c) => c.quit()));
} else {
  throw new Error(`mode ${mode}: sidelock or redlock`);
}

const run = `${mode}-${process.pid}`;
for (let i = 0; i < 200; i++) await pair(`${run}/warm/${i}`);

const lat = [];
for (let i = 0; i < sequential; i++) {
  const t0 = process.hrtime.bigint();
  await pair(`${run}/seq/${i}`);
  lat.push(Number(process.hrtime.bigint() - t0) / 1000);
}
lat.sort((a, b) => a - b);

let next = 0;
const t0 = process.hrtime.bigint();
await Promise.all(Array.from({ length: callers }, async (_, w) => {
  for (let i = next++; i < parallelPairs; i = next++) await pair(`${run}/par/${w}/${i}`);
}));
const secs = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(JSON.stringify({ mode, p50_us: Math.round(lat[Math.floor(lat.length / 2)]), pairs_per_s: Math.round(parallelPairs / secs), overloaded_429: overloaded }));
await close();
