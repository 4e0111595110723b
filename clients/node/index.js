// sidelock: distributed locks from the pod's sidecar, for Node.js 18.17 and
// later. One dependency: undici, whose keep-alive Pool carries every request
// (one pool of connections per Client): node:http's Agent costs 1.1-1.4x its
// CPU per lock, the global fetch 3-5x (make bench-clients). Types are in
// index.d.ts; docs/clients.md describes every call.

import { Pool } from "undici";

/** Where the sidecar's lock API listens in a pod. */
export const DEFAULT_ADDR = "http://127.0.0.1:7420";

/** The shortest pause between two heartbeats, so a tiny ttl cannot spin. */
const MIN_HEARTBEAT_MS = 50;

/** The pause before a watch reconnects until its stream's retry: says
 * otherwise (the sidecar sends 1000). */
const DEFAULT_RETRY_MS = 1000;

const WATCH_QUERY = new URLSearchParams({ watch: "true" });

// Errors: the class is chosen from the problem's stable code alone.

/** Any error answered by the sidecar, or a failure to reach it (status 0). */
export class SidelockError extends Error {
  constructor(code, status, detail = "", retryAfterMs = undefined, problem = {}) {
    super(`sidelock: ${status} ${code}: ${detail}`);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.detail = detail;
    this.retryAfterMs = retryAfterMs;
    this.problem = problem;
  }
}
/** 409 lock_held: another owner holds the lock (after any wait); for a
 * semaphore, all its permits are held; for a read/write lock, the other
 * side holds it (or, for a reader, a writer waits); for a lock set, one of
 * its locks is held (and the set took none). */
export class LockHeld extends SidelockError {}
/** 409 set_changed: a lock of the set ended while the set was being taken;
 * none of its locks is held, and the same call may be made again at once. */
export class SetChanged extends SidelockError {}
/** 409 permits_mismatch: this sidecar has holders or waiters of the
 * semaphore with another permits; every caller must name the same N. */
export class PermitsMismatch extends SidelockError {}
/** 410 lease_gone: this token no longer holds the lock. */
export class LeaseGone extends SidelockError {}
/** 503: the sidecar cannot serve now (shutting down, masters too slow). */
export class Unavailable extends SidelockError {}
/** 503 no_quorum: fewer than a majority of masters answered. */
export class NoQuorum extends Unavailable {}
/** 429: overloaded or at a limit (locks, waiters, watchers); retry after retryAfterMs. */
export class Overloaded extends SidelockError {}
/** 401 unauthorized: the sidecar requires its API token. */
export class Unauthorized extends SidelockError {}
/** 4xx: the request was refused as malformed (bad name, ttl, token...). */
export class InvalidRequest extends SidelockError {}
/** 422 idempotency_mismatch: the key was used with other parameters. */
export class IdempotencyMismatch extends InvalidRequest {}
/** The sidecar could not be reached in time, or its answer was not understood. */
export class Unreachable extends SidelockError {}

/** The reason a KeptLock's signal aborts with: the lock was lost. */
export class LockLost extends Error {
  constructor(reason) {
    super(`sidelock: the lock was lost (${reason})`);
    this.name = "LockLost";
    this.reason = reason;
  }
}

/** The one map from a problem code to its class; codes not listed fall
 * back by prefix (invalid_*) or to SidelockError. */
export const ERRORS_BY_CODE = Object.freeze({
  lock_held: LockHeld,
  permits_mismatch: PermitsMismatch,
  set_changed: SetChanged,
  lease_gone: LeaseGone,
  no_quorum: NoQuorum,
  shutting_down: Unavailable,
  timeout: Unavailable,
  overloaded: Overloaded,
  too_many_locks: Overloaded,
  too_many_waiters: Overloaded,
  too_many_watchers: Overloaded,
  unauthorized: Unauthorized,
  idempotency_mismatch: IdempotencyMismatch,
  missing_token: InvalidRequest,
  invalid_request: InvalidRequest,
  ambiguous_framing: InvalidRequest,
  body_too_large: InvalidRequest,
  not_found: InvalidRequest,
  method_not_allowed: InvalidRequest,
});

/** The typed error for a problem-details body answered with status. */
export function errorFor(status, problem) {
  const code = String(problem?.code || "http_error");
  const Class = ERRORS_BY_CODE[code] ?? (code.startsWith("invalid_") ? InvalidRequest : SidelockError);
  const retry = problem?.retry_after_ms;
  return new Class(code, status, String(problem?.detail ?? ""), retry > 0 ? retry : undefined, problem ?? {});
}

// Durations and paths.

/** A duration as the sidecar reads it: strings are Go durations ("30s",
 * "1m30s") and pass as they are; numbers are seconds, sent to the ms. */
export function goDuration(d) {
  if (typeof d === "string") return d;
  if (typeof d !== "number" || !(d >= 0)) throw new TypeError(`a duration is a Go duration string or seconds >= 0, got ${d}`);
  return Number.isInteger(d) ? `${d}s` : `${Math.round(d * 1000)}ms`;
}

const UNIT_MS = { ns: 1e-6, us: 1e-3, "µs": 1e-3, "μs": 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };

/** A Go duration ("1m0s", "500ms") or seconds, in milliseconds. */
export function durationMs(d) {
  if (typeof d === "number") return d * 1000;
  if (d === "0") return 0;
  let total = 0;
  let rest = d;
  const part = /^(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/;
  for (let m = part.exec(rest); m && rest; m = part.exec(rest)) {
    total += Number(m[1]) * UNIT_MS[m[2]];
    rest = rest.slice(m[0].length);
  }
  if (rest !== "" || d === "") throw new TypeError(`not a Go duration: ${JSON.stringify(d)}`);
  return total;
}

/**
 * The URL path of a lock. The whole name is one escaped segment, its '/'
 * sent as %2F (the sidecar decodes it once: "orders%2F42" is "orders/42"),
 * because WHATWG URL parsers (fetch's, many proxies') remove "." and ".." segments, escaped or
 * not, and would silently name another lock: "a/../b" would lock "b".
 * The sidecar refuses such names; only a name that is all one dot
 * segment cannot reach it intact, so it is refused here.
 */
export function lockPath(name) {
  return "/locks/" + escapeName(name);
}

/** The URL path of a semaphore, its name escaped as a lock's is.
 * Semaphores are a keyspace of their own: semaphore "x" is not lock "x". */
export function semaphorePath(name) {
  return "/semaphores/" + escapeName(name);
}

/** The URL path of a read/write lock, its name escaped as a lock's is;
 * a keyspace of its own too: read/write lock "x" is neither lock "x" nor
 * semaphore "x". */
export function rwlockPath(name) {
  return "/rwlocks/" + escapeName(name);
}

/** The URL path of a lock set: its lock names (an array, or one string
 * "a,b"), each escaped as a lock's, joined by "," (which lock names cannot
 * contain). The sidecar takes them in its own canonical (sorted) order, so
 * any order names the same set. */
export function lockSetPath(names) {
  const list = typeof names === "string" ? names.split(",") : [...names];
  return "/locksets/" + list.map(escapeName).join(",");
}

function escapeName(name) {
  if (name === "." || name === "..") throw new InvalidRequest("invalid_name", 0, `name ${JSON.stringify(name)} is a dot segment`);
  return encodeURIComponent(name);
}

/** The query of an acquire: durations always as Go duration strings;
 * permits for a semaphore, mode for a read/write lock. */
function acquireQuery({ ttl, wait, owner, maxHold } = {}, { hold = false, permits, mode } = {}) {
  const q = new URLSearchParams();
  if (ttl !== undefined) q.set("ttl", goDuration(ttl));
  if (wait !== undefined) q.set("wait", goDuration(wait));
  if (maxHold !== undefined) q.set("max_hold", goDuration(maxHold));
  if (owner !== undefined) q.set("owner", owner);
  if (hold) q.set("hold", "true");
  if (permits !== undefined) q.set("permits", String(permits));
  if (mode !== undefined) q.set("mode", mode);
  return q;
}

// What the sidecar answers.

function parseLease(b) {
  return {
    name: b.name,
    token: b.token ?? "",
    owner: b.owner ?? "",
    ttl: b.ttl,
    acquiredAt: new Date(b.acquired_at),
    leaseExpiresAt: new Date(b.lease_expires_at),
    // Date keeps milliseconds: the sidecar's nanoseconds are cut, never rounded up.
    validUntil: new Date(b.valid_until),
    fence: b.fence ?? 0,
    maxHoldAt: b.max_hold_at ? new Date(b.max_hold_at) : undefined,
    // A semaphore's permit: N, and which of the N slots it holds; a
    // read/write lock's reader: which reader slot it holds.
    permits: b.permits,
    slot: b.slot,
    // A read/write lock's side: "shared" or "exclusive".
    mode: b.mode,
    // A lock set's locks, in canonical order, each with its own fence.
    locks: b.locks?.map((l) => ({ name: l.name, fence: l.fence ?? 0, validUntil: new Date(l.valid_until) })),
  };
}

function parseStatus(b) {
  return {
    name: b.name,
    held: Boolean(b.held),
    owner: b.owner ?? "",
    validUntil: b.valid_until ? new Date(b.valid_until) : undefined,
    fence: b.fence,
  };
}

function parseHolder(h) {
  return { slot: h.slot ?? 0, owner: h.owner ?? "", fence: h.fence ?? 0, validUntil: new Date(h.valid_until) };
}

function parseSemaphoreStatus(b) {
  return { name: b.name, permits: b.permits, held: b.held, holders: (b.holders ?? []).map(parseHolder) };
}

function parseRWLockStatus(b) {
  const readers = (b.readers ?? []).map(parseHolder);
  return {
    name: b.name,
    writer: b.writer ? parseHolder(b.writer) : undefined,
    readers,
    readerCount: b.reader_count ?? readers.length,
    writerWaiting: Boolean(b.writer_waiting),
  };
}

function parseLockSetStatus(b) {
  return { name: b.name, locks: (b.locks ?? []).map(parseStatus), held: b.held ?? 0 };
}

/** One event of a watch as a change: held is true or false, or undefined
 * while unknown (unavailable, or a kind this client does not know). */
export function parseChange(kind, b) {
  const held = kind === "acquired" ? true : kind === "released" ? false : kind === "state" ? Boolean(b.held) : undefined;
  return {
    kind,
    name: b.name ?? "",
    held,
    owner: b.owner ?? "",
    fence: b.fence,
    validUntil: b.valid_until ? new Date(b.valid_until) : undefined,
    since: b.since ? new Date(b.since) : undefined,
    reason: b.reason ?? "",
    detail: b.detail ?? "",
  };
}

/** Events of a text/event-stream body (an async iterable of bytes: a
 * response of node:http, or a fetch body), as {event, data, id}. Comments
 * are skipped; data lines are joined with newlines; a valid retry
 * (milliseconds) goes to onRetry, for a reader that reconnects. */
export async function* readEvents(body, { onRetry } = {}) {
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "";
  let data = [];
  let id;
  for await (const value of body) {
    buffer += decoder.decode(value, { stream: true });
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline).replace(/\r$/, "");
      buffer = buffer.slice(newline + 1);
      if (line === "") {
        if (data.length > 0) yield { event: event || "message", data: data.join("\n"), id };
        event = "";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
      else if (field === "id") id = value;
      else if (field === "retry" && /^\d+$/.test(value)) onRetry?.(Number(value));
    }
  }
}

/** Whether a request may be sent again after the kept-alive connection it
 * went out on turned out closed by the sidecar: reads, heartbeats and
 * releases, and an acquire with an Idempotency-Key (net/http's rule). */
function replayable(method, headers) {
  return method !== "POST" || "Idempotency-Key" in headers;
}

/** The codes of a connection that closed under a request before any answer. */
const CLOSED_UNDER = new Set(["ECONNRESET", "EPIPE", "UND_ERR_SOCKET"]);

/** How long an idle connection is kept: below the sidecar's idle timeout
 * (30s), above a heartbeat's pause for the default ttl (10s). */
const KEEP_ALIVE_MS = 20000;

/** A client of one sidecar. */
export class Client {
  #pool;
  #prefix;

  /**
   * baseUrl defaults to $SIDELOCK_ADDR, else http://127.0.0.1:7420; apiToken
   * to $SIDELOCK_API_TOKEN (sent only when set); timeoutMs bounds each
   * request on top of the wait it asks for. Requests reuse kept-alive
   * connections (an undici Pool of the client's own); close() closes them.
   */
  constructor({ baseUrl, apiToken, timeoutMs = 10000 } = {}) {
    const env = globalThis.process?.env ?? {};
    this.baseUrl = (baseUrl ?? env.SIDELOCK_ADDR ?? DEFAULT_ADDR).replace(/\/+$/, "");
    this.apiToken = apiToken ?? (env.SIDELOCK_API_TOKEN || undefined);
    this.timeoutMs = timeoutMs;
    const url = new URL(this.baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError(`baseUrl must be an http(s) URL, got ${this.baseUrl}`);
    this.#prefix = url.pathname.replace(/\/+$/, "");
    this.#pool = new Pool(url.origin, { keepAliveTimeout: KEEP_ALIVE_MS, keepAliveMaxTimeout: KEEP_ALIVE_MS });
  }

  /** Close the kept-alive connections, once the requests in flight are
   * answered; the client cannot be used after. */
  close() {
    return this.#pool.close();
  }

  /** Take the lock, waiting up to opts.wait while another owner holds it;
   * rejects with LockHeld when it is still held after the wait. */
  async acquire(name, opts = {}) {
    return this._acquire(lockPath(name), acquireQuery(opts), opts);
  }

  /** The heartbeat: push the lease out (by opts.ttl when given). */
  async extend(name, token, opts = {}) {
    return this._extend(lockPath(name), token, opts);
  }

  /** Give the lock up; rejects with LeaseGone if the token no longer held it. */
  async release(name, token, opts = {}) {
    return this._release(lockPath(name), token, opts);
  }

  /** Who holds the lock now, read from the masters (never the token). */
  async inspect(name, { signal } = {}) {
    return parseStatus(await this.#call("GET", lockPath(name), undefined, {}, this.timeoutMs, signal));
  }

  /**
   * Acquire name and keep it until released: heartbeats at a third of the
   * shorter of its ttl and its validity, or with opts.hold held over a
   * server-sent events stream (no heartbeats; the sidecar releases it the
   * moment the connection closes, even if this process is killed). When
   * the lock is lost, its signal aborts and opts.onLost(reason) is called
   * once; it is never taken again behind the caller's back.
   */
  async lock(name, opts = {}) {
    return this.#keep(lockPath(name), opts);
  }

  /** Run fn(lock) holding name; the lock is released when fn settles. */
  async withLock(name, opts, fn) {
    return runHolding(await this.lock(name, opts), fn);
  }

  // Semaphores: at most `permits` holders of a name at once. Each call is
  // its lock counterpart with permits, which every caller of the semaphore
  // must give alike (PermitsMismatch otherwise).

  /** Take one of the semaphore's permits, waiting up to opts.wait while all
   * are held; the lease carries permits and slot. Rejects with LockHeld
   * when all are still held after the wait. */
  async acquireSemaphore(name, permits, opts = {}) {
    return this._acquire(semaphorePath(name), acquireQuery(opts, { permits }), opts);
  }

  /** The heartbeat of a permit, as extend is a lock's. */
  async extendSemaphore(name, token, opts = {}) {
    return this._extend(semaphorePath(name), token, opts);
  }

  /** Give the permit up; rejects with LeaseGone if the token no longer held it. */
  async releaseSemaphore(name, token, opts = {}) {
    return this._release(semaphorePath(name), token, opts);
  }

  /** Who holds the semaphore's permits now: one holder per held slot. */
  async inspectSemaphore(name, permits, { signal } = {}) {
    const query = new URLSearchParams({ permits: String(permits) });
    return parseSemaphoreStatus(await this.#call("GET", semaphorePath(name), query, {}, this.timeoutMs, signal));
  }

  /** Take one of the semaphore's permits and keep it until released,
   * exactly as lock() keeps a lock; the kept permit has permits and slot. */
  async semaphore(name, permits, opts = {}) {
    return this.#keep(semaphorePath(name), opts, { permits });
  }

  /** Run fn(permit) holding one of the semaphore's permits; released when fn settles. */
  async withSemaphore(name, permits, opts, fn) {
    return runHolding(await this.semaphore(name, permits, opts), fn);
  }

  // Read/write locks: many readers ("shared") or one writer ("exclusive")
  // at once. Each call is its lock counterpart with the mode; extend and
  // release find the reader or the writer by its token alone.

  /** Read ("shared") or write ("exclusive") the lock, waiting up to
   * opts.wait while the other side holds it: a writer holding or waiting,
   * for a reader; readers or another writer, for a writer. Rejects with
   * LockHeld when it is still held after the wait. The lease carries mode;
   * a reader's its slot, a writer's a fence. */
  async acquireRWLock(name, mode, opts = {}) {
    return this._acquire(rwlockPath(name), acquireQuery(opts, { mode }), opts);
  }

  /** The heartbeat of a reader or the writer, as extend is a lock's. */
  async extendRWLock(name, token, opts = {}) {
    return this._extend(rwlockPath(name), token, opts);
  }

  /** Give the read or the write up; rejects with LeaseGone if the token no longer held it. */
  async releaseRWLock(name, token, opts = {}) {
    return this._release(rwlockPath(name), token, opts);
  }

  /** Who reads or writes the lock now, and whether a writer waits. */
  async inspectRWLock(name, { signal } = {}) {
    return parseRWLockStatus(await this.#call("GET", rwlockPath(name), undefined, {}, this.timeoutMs, signal));
  }

  /** Read or write the lock and keep it until released, exactly as lock()
   * keeps a lock; the kept lock has mode (and a reader its slot). */
  async rwlock(name, mode, opts = {}) {
    return this.#keep(rwlockPath(name), opts, { mode });
  }

  /** Run fn(lock) reading or writing the lock; released when fn settles. */
  async withRWLock(name, mode, opts, fn) {
    return runHolding(await this.rwlock(name, mode, opts), fn);
  }

  // Lock sets: several locks taken all or nothing under one lease (one
  // token, one fence per lock), in the sidecar's canonical order, so that
  // sets that overlap cannot deadlock. Each call is its lock counterpart
  // with the set's names (an array, or "a,b"; any order).

  /** Take every lock of the set, waiting up to opts.wait in all while any
   * is held. Rejects with LockHeld when one is still held after the wait,
   * SetChanged when one ended while the set was being taken; either way
   * none is held. The lease is named by the set's canonical name, has no
   * fence of its own and lists its locks, each with its fence; it is valid
   * until the earliest of theirs. */
  async acquireLockSet(names, opts = {}) {
    return this._acquire(lockSetPath(names), acquireQuery(opts), opts);
  }

  /** The heartbeat of the whole set, as extend is a lock's. */
  async extendLockSet(names, token, opts = {}) {
    return this._extend(lockSetPath(names), token, opts);
  }

  /** Give every lock of the set up; rejects with LeaseGone if the token no longer held it. */
  async releaseLockSet(names, token, opts = {}) {
    return this._release(lockSetPath(names), token, opts);
  }

  /** Who holds each lock of the set now, read from the masters. */
  async inspectLockSet(names, { signal } = {}) {
    return parseLockSetStatus(await this.#call("GET", lockSetPath(names), undefined, {}, this.timeoutMs, signal));
  }

  /** Take every lock of the set and keep them until released, exactly as
   * lock() keeps a lock; the kept set has its locks (each with its fence),
   * and is lost as a whole when any of them ends. */
  async lockSet(names, opts = {}) {
    return this.#keep(lockSetPath(names), opts);
  }

  /** Run fn(set) holding every lock of the set; released when fn settles. */
  async withLockSet(names, opts, fn) {
    return runHolding(await this.lockSet(names, opts), fn);
  }

  // Watching a lock, and leader election: a lock whose owner names the leader.

  /**
   * Follow who holds the lock name: yields a change per event of GET
   * /locks/{name}?watch=true, a "state" first, until opts.signal aborts
   * or the loop stops. A stream that breaks is reconnected after the
   * stream's retry delay with the Last-Event-ID of the last event seen,
   * and an "unavailable" change is yielded meanwhile: the holder is
   * unknown until the "state" the sidecar sends on the new stream. While
   * the sidecar is unreachable, unavailable or overloaded it keeps
   * trying; errors that trying again cannot mend (a bad name, a refused
   * API token) are thrown. Anyone may watch: no token.
   */
  async *watch(name, { signal } = {}) {
    const path = lockPath(name);
    let lastId;
    let retryMs = DEFAULT_RETRY_MS;
    let stream;
    try {
      stream = await this.#openWatch(path, lastId, signal);
    } catch (e) {
      if (signal?.aborted) return;
      throw e;
    }
    while (stream) {
      let why = "it ended";
      try {
        for await (const { event, data, id } of readEvents(stream.res, { onRetry: (ms) => (retryMs = ms) })) {
          if (id !== undefined) lastId = id;
          yield parseChange(event, JSON.parse(data));
        }
      } catch (e) {
        why = e?.cause?.message ?? e?.message ?? String(e);
      } finally {
        stream.close();
      }
      if (signal?.aborted) return;
      yield parseChange("unavailable", { name, detail: `the watch stream broke (${why}); reconnecting` });
      stream = await this.#reconnectWatch(path, lastId, retryMs, signal);
    }
  }

  /**
   * Run for leader of name until elected; resolves with the term: the
   * lock held over a stream (hold), its owner (required) naming this
   * candidate to everyone who watches or asks leader(). Each attempt waits
   * up to opts.wait (default 10s) in the sidecar's queue; a LockHeld
   * (someone else still leads) starts the next at once, until opts.signal
   * aborts, which rejects with its reason at once. The sidecar grants the
   * waiting attempt the moment the leader resigns, and within one key ttl
   * of its pod dying. The term's fence is its number, greater than every
   * earlier term's; it ends when the lock is lost (signal, onLost) or
   * released (resigning).
   */
  async campaign(name, { wait = "10s", ...opts } = {}) {
    if (!opts.owner) throw new TypeError("a campaign names its candidate: owner is required");
    if (!(durationMs(wait) > 0)) throw new TypeError("a campaign waits in the queue: wait must be positive");
    for (;;) {
      try {
        return await this.lock(name, { ...opts, wait, hold: true });
      } catch (e) {
        if (!(e instanceof LockHeld) || opts.signal?.aborted) throw e;
      }
    }
  }

  /** Who leads name now: the owner of its lock, or undefined when nobody
   * holds it. One inspection; watch() follows the changes. */
  async leader(name, opts = {}) {
    const status = await this.inspect(name, opts);
    return status.held ? status.owner : undefined;
  }

  // The calls above, by URL path: a lock's, a lock set's, a semaphore's or a read/write lock's.

  async _acquire(path, query, opts) {
    const headers = opts.idempotencyKey ? { "Idempotency-Key": opts.idempotencyKey } : {};
    return parseLease(await this.#call("POST", path, query, headers, this.#waitBudget(opts.wait), opts.signal));
  }

  async _extend(path, token, { ttl, signal, timeoutMs } = {}) {
    const q = new URLSearchParams();
    if (ttl !== undefined) q.set("ttl", goDuration(ttl));
    return parseLease(await this.#call("PUT", path, q, { "Lock-Token": token }, timeoutMs ?? this.timeoutMs, signal));
  }

  async _release(path, token, { signal } = {}) {
    await this.#call("DELETE", path, undefined, { "Lock-Token": token }, this.timeoutMs, signal);
  }

  /** Acquires and keeps what path names; kind is a semaphore's {permits}
   * or a read/write lock's {mode}. */
  async #keep(path, opts, kind = {}) {
    if (opts.hold) return HeldLock.open(this, path, acquireQuery(opts, { ...kind, hold: true }), opts);
    return new HeartbeatLock(this, path, await this._acquire(path, acquireQuery(opts, kind), opts), opts.onLost);
  }

  /** One watch stream, aborted by signal for as long as it is open; close() ends it. */
  async #openWatch(path, lastId, signal) {
    const stream = new AbortController();
    const abort = () => stream.abort(signal.reason);
    signal?.addEventListener("abort", abort, { once: true });
    const close = () => {
      signal?.removeEventListener("abort", abort);
      stream.abort();
    };
    try {
      const headers = lastId === undefined ? {} : { "Last-Event-ID": lastId };
      const { res, stop } = await this._openStream("GET", path, WATCH_QUERY, headers, this.timeoutMs, signal, stream);
      stop(); // the stream stays open: only the caller's signal (above) ends it
      return { res, close };
    } catch (e) {
      close();
      throw e;
    }
  }

  /** The next watch stream, after the retry delay; undefined once signal aborts. */
  async #reconnectWatch(path, lastId, retryMs, signal) {
    for (let delay = retryMs; await pause(delay, signal); ) {
      try {
        return await this.#openWatch(path, lastId, signal);
      } catch (e) {
        if (signal?.aborted) return undefined;
        if (!(e instanceof Unreachable || e instanceof Unavailable || e instanceof Overloaded)) throw e;
        delay = Math.max(retryMs, e.retryAfterMs ?? 0); // restarting, or busy: try again
      }
    }
    return undefined;
  }

  #waitBudget(wait) {
    return this.timeoutMs + (wait === undefined ? 0 : durationMs(wait));
  }

  #path(path, query) {
    const q = query?.toString();
    return this.#prefix + path + (q ? "?" + q : "");
  }

  #headers(extra) {
    return this.apiToken ? { ...extra, Authorization: `Bearer ${this.apiToken}` } : extra;
  }

  /** One request on a kept-alive connection, its answer read whole and
   * decoded (undefined when empty). A non-2xx answer rejects with its typed
   * error, no answer within timeoutMs with Unreachable, the caller's abort
   * with its reason. */
  async #call(method, path, query, headers, timeoutMs, signal) {
    let res;
    try {
      res = await this.#send(method, path, query, headers, timeoutMs, signal);
    } catch (e) {
      if (!(CLOSED_UNDER.has(e?.code) && replayable(method, headers)) || signal?.aborted) throw unreachable(method, path, e, signal);
      // The sidecar closed the kept-alive connection as it was taken: once more, on another.
      res = await this.#send(method, path, query, headers, timeoutMs, signal).catch((e2) => {
        throw unreachable(method, path, e2, signal);
      });
    }
    const body = await res.body.text().catch((e) => {
      throw unreachable(method, path, e, signal);
    });
    if (res.statusCode >= 300) throw problemError(res.statusCode, body);
    return body.length > 0 ? JSON.parse(body) : undefined;
  }

  #send(method, path, query, headers, timeoutMs, signal) {
    return this.#pool.request({
      method,
      path: this.#path(path, query),
      headers: this.#headers(headers),
      signal,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
  }

  /** POST ?hold=true, answered with an event stream left open for reading,
   * within the acquire's budget. */
  _openHold(path, query, opts, stream) {
    return this._openStream("POST", path, query, {}, this.#waitBudget(opts.wait), opts.signal, stream);
  }

  /**
   * A request answered with an event stream (an acquire with hold, a
   * watch) on a connection of its own, never pooled: resolves with the
   * response (an async iterable of bytes) once its head arrived. The
   * stream outlives the request, so it is closed by stream (an
   * AbortController), which the caller's signal and budgetMs abort until
   * stop().
   */
  async _openStream(method, path, query, headers, budgetMs, callerSignal, stream) {
    const onAbort = () => stream.abort(callerSignal.reason);
    const stop = () => callerSignal?.removeEventListener("abort", onAbort);
    if (callerSignal?.aborted) throw callerSignal.reason;
    callerSignal?.addEventListener("abort", onAbort, { once: true });
    let res;
    try {
      // The answer's head within budgetMs; the stream itself may then stay
      // silent for as long as the lock does (no body timeout).
      res = await this.#pool.request({
        method,
        path: this.#path(path, query),
        headers: this.#headers(headers),
        signal: stream.signal,
        headersTimeout: budgetMs,
        bodyTimeout: 0,
      });
    } catch (e) {
      stop();
      throw unreachable(method, path, e, callerSignal);
    }
    if (res.statusCode >= 300) {
      stop();
      throw problemError(res.statusCode, await res.body.text().catch(() => ""));
    }
    if (res.statusCode !== 200 || !String(res.headers["content-type"] ?? "").startsWith("text/event-stream")) {
      stop();
      stream.abort();
      throw new Unreachable("unexpected_answer", res.statusCode, `${method} ${path}: not an event stream`);
    }
    return { res: res.body, stop };
  }
}

/** The error of a request that got no answer: the caller's abort reason,
 * a timeout, or the sidecar out of reach. */
function unreachable(method, path, e, signal) {
  if (signal?.aborted) return signal.reason;
  if (e instanceof SidelockError) return e;
  if (e?.code === "UND_ERR_HEADERS_TIMEOUT" || e?.code === "UND_ERR_BODY_TIMEOUT") return new Unreachable("timeout", 0, `${method} ${path}: ${e.message}`);
  return new Unreachable("unreachable", 0, `${method} ${path}: ${e?.message ?? e}`);
}

/** fn(kept), then the release, whether fn returned or threw. */
async function runHolding(kept, fn) {
  try {
    return await fn(kept);
  } finally {
    await kept.release();
  }
}

/** Resolves true after ms, or false as soon as signal aborts. */
function pause(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const done = (elapsed) => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(elapsed);
    };
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The typed error of a non-2xx answer (problem details, or not). */
function problemError(status, text) {
  let problem;
  try {
    problem = JSON.parse(text);
  } catch {
    problem = undefined;
  }
  if (!problem || typeof problem !== "object" || !problem.code) problem = { code: "http_error", detail: text.trim().slice(0, 512) };
  return errorFor(status, problem);
}

/** Why a lease whose validUntil passed without news ended: its max_hold
 * if that is what capped the validity, else "expired". */
function expiryReason(lease) {
  return lease.maxHoldAt && lease.validUntil >= lease.maxHoldAt ? "max_hold" : "expired";
}

/**
 * A lock kept alive until released. Check valid() before acting; signal
 * aborts (with a LockLost whose reason says why) when the lock is lost:
 * the sidecar said so ("lost", "max_hold", "expired", "shutdown",
 * "released" by someone else), a heartbeat was refused ("lease_gone"),
 * the held stream broke ("disconnected"), or validUntil passed without a
 * renewal ("expired", or "max_hold" when that capped it). Releasing does
 * not abort it.
 */
export class KeptLock {
  #lost = new AbortController();
  #onLost;
  released = false;
  lostReason = undefined;

  constructor(client, path, lease, onLost) {
    this.client = client;
    this.path = path; // /locks/..., /locksets/..., /semaphores/... or /rwlocks/...: where extend and release go
    this.lease = lease;
    this.#onLost = onLost;
  }

  get name() {
    return this.lease.name;
  }
  get token() {
    return this.lease.token;
  }
  /** The grant's fencing token (docs/fencing.md): pass it along. */
  get fence() {
    return this.lease.fence;
  }
  /** A semaphore's N (undefined for a lock). */
  get permits() {
    return this.lease.permits;
  }
  /** Which of a semaphore's N slots this permit holds, or which reader
   * slot a read/write lock's reader holds (undefined for a lock). */
  get slot() {
    return this.lease.slot;
  }
  /** A read/write lock's side: "shared" or "exclusive" (undefined else). */
  get mode() {
    return this.lease.mode;
  }
  /** A lock set's locks, in canonical order, each with its own fence
   * (undefined for anything else). */
  get locks() {
    return this.lease.locks;
  }
  /** Act on the lock only before this instant. */
  get validUntil() {
    return this.lease.validUntil;
  }
  /** Aborts when the lock is lost. */
  get signal() {
    return this.#lost.signal;
  }

  /** True while the lock is held and its validUntil has not passed. */
  valid() {
    return !this.#lost.signal.aborted && !this.released && Date.now() < this.lease.validUntil.getTime();
  }

  /** Push the lease out now (with a new ttl when given) and resolve with
   * the fresh lease; later heartbeats keep that ttl. Rejects with
   * LeaseGone, and marks the lock lost, once the token no longer holds it. */
  async extend(ttl) {
    try {
      this.lease = await this.client._extend(this.path, this.token, { ttl });
    } catch (e) {
      if (e instanceof LeaseGone) this._markLost("lease_gone");
      throw e;
    }
    this._renewed();
    return this.lease;
  }

  /** The lease moved: a keeper re-arms what follows its validUntil. */
  _renewed() {}

  _markLost(reason) {
    if (this.#lost.signal.aborted || this.released) return;
    this.lostReason = reason;
    this.#lost.abort(new LockLost(reason));
    this.#onLost?.(reason);
  }
}

if (typeof Symbol.asyncDispose === "symbol") {
  // `await using lock = await client.lock(...)` releases at the block's end.
  KeptLock.prototype[Symbol.asyncDispose] = function () {
    return this.release();
  };
}

/** A lease extended at a third of the shorter of its ttl and its
 * validity, so two heartbeats can fail before either runs out. */
export class HeartbeatLock extends KeptLock {
  #timer;
  #beating = Promise.resolve();

  constructor(client, path, lease, onLost) {
    super(client, path, lease, onLost);
    this.#schedule(this.#interval());
  }

  async release() {
    if (this.released) return;
    this.released = true;
    clearTimeout(this.#timer);
    await this.#beating; // at most one extend in flight, bounded by the validity left
    try {
      await this.client._release(this.path, this.token);
    } catch (e) {
      if (!(e instanceof LeaseGone)) throw e; // gone already: nothing to give up
    }
  }

  #interval() {
    const validity = this.lease.validUntil.getTime() - Date.now();
    return Math.max(Math.min(durationMs(this.lease.ttl), validity) / 3, MIN_HEARTBEAT_MS);
  }

  #schedule(ms) {
    // unref: a forgotten lock does not keep the process alive; its lease lapses.
    this.#timer = setTimeout(() => (this.#beating = this.#beat(ms)), ms);
    this.#timer.unref?.();
  }

  async #beat(lastDelay) {
    if (this.released) return;
    const left = this.lease.validUntil.getTime() - Date.now();
    if (left <= 0) return this._markLost(expiryReason(this.lease));
    try {
      const lease = await this.client._extend(this.path, this.token, { timeoutMs: left });
      if (this.released) return;
      this.lease = lease;
      this.#schedule(this.#interval());
    } catch (e) {
      if (this.released) return;
      if (e instanceof LeaseGone) return this._markLost("lease_gone");
      this.#schedule(Math.max(Math.min(lastDelay, left / 3), MIN_HEARTBEAT_MS)); // retry sooner, until validUntil
    }
  }
}

/**
 * A lock held over a server-sent events stream (POST ?hold=true). Each
 * "renewed" moves validUntil; a final "lost" or "released" (not asked
 * for), a stream that ends, or silence past validUntil marks it lost and
 * closes the stream. It never reconnects: a new stream would be a new
 * acquisition.
 */
export class HeldLock extends KeptLock {
  #stream;
  #watchdog;
  #reading;

  static async open(client, path, query, opts) {
    const stream = new AbortController();
    const { res, stop } = await client._openHold(path, query, opts, stream);
    const events = readEvents(res);
    let first;
    try {
      first = (await events.next()).value;
      if (first?.event !== "acquired") throw new Unreachable("unexpected_answer", 200, `the held stream opened with ${first?.event}, not acquired`);
      return new HeldLock(client, path, parseLease(JSON.parse(first.data)), opts.onLost, stream, events);
    } catch (e) {
      if (opts.signal?.aborted) throw opts.signal.reason;
      if (stream.signal.reason instanceof SidelockError) throw stream.signal.reason; // the acquire's timeout
      stream.abort();
      if (e instanceof SidelockError) throw e;
      throw new Unreachable("unreachable", 0, `reading the held stream: ${e?.message ?? e}`);
    } finally {
      stop();
    }
  }

  constructor(client, path, lease, onLost, stream, events) {
    super(client, path, lease, onLost);
    this.#stream = stream;
    this.#arm();
    this.#reading = this.#read(events);
  }

  async release() {
    if (this.released) return;
    this.released = true;
    try {
      await this.client._release(this.path, this.token); // frees it now; closing would too, a moment later
    } catch {
      // already ended, or the sidecar unreachable: closing the stream releases
    } finally {
      this.#close();
      await this.#reading;
    }
  }

  _renewed() {
    this.#arm();
  }

  #arm() {
    clearTimeout(this.#watchdog);
    this.#watchdog = setTimeout(() => {
      this._markLost(expiryReason(this.lease));
      this.#close();
    }, Math.max(this.lease.validUntil.getTime() - Date.now(), 0));
    this.#watchdog.unref?.();
  }

  async #read(events) {
    try {
      for await (const { event, data } of events) {
        const payload = JSON.parse(data);
        if (event === "renewed" || event === "expiring") {
          this.lease = { ...this.lease, validUntil: new Date(payload.valid_until) };
          this.#arm();
        } else if (event === "lost" || event === "released") {
          this._markLost(payload.reason || event);
          return;
        }
      }
      this._markLost("disconnected");
    } catch {
      this._markLost("disconnected");
    } finally {
      this.#close();
    }
  }

  #close() {
    clearTimeout(this.#watchdog);
    this.#stream.abort();
  }
}
