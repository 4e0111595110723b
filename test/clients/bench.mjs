// CPU per lock (acquire + release) of the Node client beside a bare undici
// keep-alive Pool, on the same sidecar, in one process: the modes take turns
// in short slices (round robin), each slice's process.cpuUsage() counted to
// its mode, so that a busy machine weighs on every mode alike. make
// bench-clients runs it (clients/bench_test.go: a real sidecar over three
// real redis-server masters); by hand:
//
//   SIDELOCK_ADDR=http://127.0.0.1:7420 node bench.mjs client,http,undici 64 12 500
//
// modes: client (clients/node), http (node:http with a keep-alive Agent,
// bare), undici (Pool.request, bare: the baseline), fetch (the global fetch,
// bare), old (the client at SIDELOCK_OLD_CLIENT, e.g. the fetch-based one
// from git). Arguments: modes, callers, slices per mode, slice ms. Prints
// one JSON line per mode.
import { performance } from "node:perf_hooks";

const [modesArg = "client,undici", callersArg = "64", slicesArg = "12", sliceArg = "500"] = process.argv.slice(2);
const modes = modesArg.split(",");
const callers = Number(callersArg);
const slices = Number(slicesArg);
const sliceMs = Number(sliceArg);
const base = process.env.SIDELOCK_ADDR ?? "http://127.0.0.1:7420";

/** One acquire + release of name, by the mode's means. */
async function pairFor(mode) {
  switch (mode) {
    case "client":
    case "old": {
      const path = mode === "old" ? process.env.SIDELOCK_OLD_CLIENT : "../../clients/node/index.js";
      const { Client } = await import(new URL(path, import.meta.url).href);
      const client = new Client({ baseUrl: base });
      return async (name) => {
        const lease = await client.acquire(name, { ttl: "30s" });
        await client.release(name, lease.token);
      };
    }
    case "http": {
      const http = await import("node:http");
      const agent = new http.Agent({ keepAlive: true });
      const url = new URL(base);
      const send = (method, path, headers) =>
        new Promise((resolve, reject) => {
          const req = http.request({ host: url.hostname, port: url.port, method, path, headers, agent }, (res) => {
            const chunks = [];
            res.on("data", (c) => chunks.push(c));
            res.on("end", () => resolve({ status: res.statusCode, body: Buffer.concat(chunks) }));
          });
          req.on("error", reject);
          req.end();
        });
      return async (name) => {
        const path = "/locks/" + encodeURIComponent(name);
        const acq = await send("POST", path + "?ttl=30s", {});
        if (acq.status !== 200) throw new Error(`acquire ${acq.status}: ${acq.body}`);
        const { token } = JSON.parse(acq.body.toString());
        const rel = await send("DELETE", path, { "lock-token": token });
        if (rel.status !== 204) throw new Error(`release ${rel.status}`);
      };
    }
    case "undici": {
      const { Pool } = await import("undici");
      const pool = new Pool(base, { connections: callers, pipelining: 1 });
      return async (name) => {
        const path = "/locks/" + encodeURIComponent(name);
        const acq = await pool.request({ method: "POST", path: path + "?ttl=30s" });
        if (acq.statusCode !== 200) throw new Error(`acquire ${acq.statusCode}: ${await acq.body.text()}`);
        const { token } = await acq.body.json();
        const rel = await pool.request({ method: "DELETE", path, headers: { "lock-token": token } });
        await rel.body.dump();
        if (rel.statusCode !== 204) throw new Error(`release ${rel.statusCode}`);
      };
    }
    case "fetch":
      return async (name) => {
        const url = base + "/locks/" + encodeURIComponent(name);
        const acq = await fetch(url + "?ttl=30s", { method: "POST" });
        if (acq.status !== 200) throw new Error(`acquire ${acq.status}: ${await acq.text()}`);
        const { token } = await acq.json();
        const rel = await fetch(url, { method: "DELETE", headers: { "lock-token": token } });
        await rel.arrayBuffer();
        if (rel.status !== 204) throw new Error(`release ${rel.status}`);
      };
  }
  throw new Error(`unknown mode ${mode}`);
}

/** Each caller's count of pairs, across slices: a name per pair, never
 * again (one cut short by an error may leave its lock held until its ttl). */
const counts = new Map();

/** The callers of one mode for ms: pairs done, errors, latencies, CPU. */
async function slice(mode, pair, ms) {
  const out = { pairs: 0, errors: 0, latencies: [], cpuUs: 0 };
  const until = performance.now() + ms;
  const cpu0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: callers }, async (_, i) => {
      while (performance.now() < until) {
        const key = `${mode}/${i}`;
        const n = (counts.get(key) ?? 0) + 1;
        counts.set(key, n);
        const name = `bench/${key}/${process.pid}/${n}`;
        const start = performance.now();
        try {
          await pair(name);
        } catch (e) {
          if (out.errors++ < 2) console.error(`${mode}: ${e}`);
          continue;
        }
        out.pairs++;
        out.latencies.push(performance.now() - start);
      }
    }),
  );
  const cpu = process.cpuUsage(cpu0);
  out.cpuUs = cpu.user + cpu.system;
  return out;
}

const pairs = {};
for (const mode of modes) {
  pairs[mode] = await pairFor(mode);
  await slice(mode, pairs[mode], sliceMs); // warm up: connections, JIT
}
const totals = Object.fromEntries(modes.map((m) => [m, { pairs: 0, errors: 0, latencies: [], cpuUs: 0, ms: 0 }]));
for (let s = 0; s < slices; s++) {
  for (const mode of s % 2 === 0 ? modes : [...modes].reverse()) {
    const t0 = performance.now();
    const r = await slice(mode, pairs[mode], sliceMs);
    const t = totals[mode];
    t.ms += performance.now() - t0;
    t.pairs += r.pairs;
    t.errors += r.errors;
    t.cpuUs += r.cpuUs;
    t.latencies.push(...r.latencies);
  }
}
for (const mode of modes) {
  const t = totals[mode];
  t.latencies.sort((a, b) => a - b);
  const at = (q) => Number((t.latencies[Math.floor(t.latencies.length * q)] ?? NaN).toFixed(3));
  console.log(JSON.stringify({
    mode, callers, pairs: t.pairs, errors: t.errors,
    pairs_per_s: Math.round(t.pairs / (t.ms / 1000)),
    cpu_us_per_pair: Math.round(t.cpuUs / Math.max(t.pairs, 1)),
    p50_ms: at(0.5), p99_ms: at(0.99),
  }));
}
process.exit(0);
