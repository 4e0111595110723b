// Types of index.js, written by hand (the package ships plain ESM
// JavaScript: nothing to build). They type-check under `tsc --strict`
// without skipLibCheck, with or without @types/node (make clients-test:
// test/clients-js).

declare global {
  // Symbol.asyncDispose, for `await using` (TypeScript 5.2+): declared here as
  // @types/node does, for projects whose lib (before esnext) lacks it.
  interface SymbolConstructor {
    readonly asyncDispose: unique symbol;
  }
}

/** Where the sidecar's lock API listens in a pod. */
export declare const DEFAULT_ADDR: "http://127.0.0.1:7420";

/** A Go duration string ("30s", "1m30s", "500ms") or a number of seconds. */
export type Duration = string | number;

/** A read/write lock's side: one of many readers, or the one writer. */
export type Mode = "shared" | "exclusive";

/** One lock of a granted lock set, with its own fence and validity. */
export interface SetLock {
  name: string;
  /** Pass it to what you write under this lock's name (docs/fencing.md). */
  fence: number;
  validUntil: Date;
}

/** A granted lock. Act on it only before validUntil. A lock set's lease is named by the set's canonical name (its
 * names sorted, joined by ","), is valid until the earliest of its locks', has no fence of its own (0) and lists its
 * locks. */
export interface Lease {
  name: string;
  /** 32 hex characters: the capability to extend and release. */
  token: string;
  owner: string;
  /** The lease's ttl as a Go duration ("30s", "1m0s"). */
  ttl: string;
  acquiredAt: Date;
  leaseExpiresAt: Date;
  /** Act on the lock only before this instant (milliseconds, never rounded up). */
  validUntil: Date;
  /** Greater than every earlier grant's fence of this lock (docs/fencing.md); exact below 2^53, which a microsecond clock reaches in the year 2255. */
  fence: number;
  /** When the lease ends whatever the caller does. */
  maxHoldAt?: Date;
  /** A semaphore's permit: its N (undefined for a lock). */
  permits?: number;
  /** A semaphore's permit: which of the N slots it holds, 1..N; its fence orders that slot's holders only.
   * A read/write lock's reader: which reader slot it holds (its fence is 0). */
  slot?: number;
  /** A read/write lock's read or write (undefined for a lock or a permit); a writer's fence orders the writers. */
  mode?: Mode;
  /** A lock set's locks, in canonical order (undefined for anything else). */
  locks?: SetLock[];
}

/** Who holds a lock, read from the masters (never the token). */
export interface Status {
  name: string;
  held: boolean;
  owner: string;
  validUntil?: Date;
  fence?: number;
}

/** One holder as an inspection lists it: a semaphore's held slot, or a read/write lock's reader (its slot, fence 0)
 * or writer (slot 0, the writers' fence). */
export interface Holder {
  slot: number;
  owner: string;
  fence: number;
  validUntil: Date;
}

/** Who holds a semaphore's permits: held of permits, one holder per held slot, sorted by slot. */
export interface SemaphoreStatus {
  name: string;
  permits: number;
  held: number;
  holders: Holder[];
}

/** Who holds a read/write lock: its writer, or its readers (sorted by slot), and whether a writer waits. */
export interface RWLockStatus {
  name: string;
  /** undefined when no writer holds it. */
  writer: Holder | undefined;
  readers: Holder[];
  readerCount: number;
  /** A writer's intent bars new readers. */
  writerWaiting: boolean;
}

/** Who holds the locks of a set: each lock as inspect() answers it, in canonical order, and how many are held (by the
 * set or by anyone). */
export interface LockSetStatus {
  name: string;
  locks: Status[];
  held: number;
}

/** A lock set's names: an array of lock names, or one string of them joined by "," ("a,b"); any order. */
export type Names = string | readonly string[];

/** One event of a watched lock. */
export interface Change {
  /** state (the whole picture: first, and after each reconnect or outage), acquired (a new holder),
   * released (the name is free), unavailable (the holder is unknown), or a kind added later. */
  kind: "state" | "acquired" | "released" | "unavailable" | (string & {});
  name: string;
  /** undefined while unknown (unavailable). */
  held: boolean | undefined;
  /** The holder's owner: the leader, for a lock used for leader election. */
  owner: string;
  fence?: number;
  validUntil?: Date;
  /** When the sidecar first saw this holder (not when it was granted). */
  since?: Date;
  /** released: "released" (announced) or "expired" (noticed by the poll). */
  reason: string;
  /** unavailable: why the holder is unknown. */
  detail: string;
}

/** RFC 9457 problem details as the sidecar answers them. */
export interface Problem {
  code: string;
  title?: string;
  status?: number;
  detail?: string;
  retry_after_ms?: number;
  type?: string;
  [field: string]: unknown;
}

/** Any error answered by the sidecar, or a failure to reach it (status 0). */
export declare class SidelockError extends Error {
  constructor(code: string, status: number, detail?: string, retryAfterMs?: number, problem?: Problem | Record<string, unknown>);
  /** The problem's stable code: lock_held, no_quorum, invalid_ttl... */
  readonly code: string;
  /** The HTTP status; 0 when the sidecar was not reached. */
  readonly status: number;
  readonly detail: string;
  /** The sidecar's retry hint, in milliseconds. */
  readonly retryAfterMs: number | undefined;
  readonly problem: Problem | Record<string, unknown>;
}
/** 409 lock_held: another owner holds the lock (after any wait), all of a semaphore's permits are held, the other
 * side holds a read/write lock (or, for a reader, a writer waits), or one of a lock set's locks is held. */
export declare class LockHeld extends SidelockError {}
/** 409 set_changed: a lock of the set ended while the set was being taken; none is held: the same call may be made
 * again at once. */
export declare class SetChanged extends SidelockError {}
/** 409 permits_mismatch: this sidecar has holders or waiters of the semaphore with another permits. */
export declare class PermitsMismatch extends SidelockError {}
/** 410 lease_gone: this token no longer holds the lock. */
export declare class LeaseGone extends SidelockError {}
/** 503: the sidecar cannot serve now (shutting_down, timeout). */
export declare class Unavailable extends SidelockError {}
/** 503 no_quorum: fewer than a majority of masters answered. */
export declare class NoQuorum extends Unavailable {}
/** 429 overloaded, too_many_locks, too_many_waiters, too_many_watchers: retry after retryAfterMs. */
export declare class Overloaded extends SidelockError {}
/** 401 unauthorized: the sidecar requires its API token. */
export declare class Unauthorized extends SidelockError {}
/** 4xx: malformed request (invalid_name, invalid_ttl, invalid_token...). */
export declare class InvalidRequest extends SidelockError {}
/** 422 idempotency_mismatch: the key was used with other parameters. */
export declare class IdempotencyMismatch extends InvalidRequest {}
/** The sidecar could not be reached in time, or its answer was not understood. */
export declare class Unreachable extends SidelockError {}

/** The reason a KeptLock's signal aborts with. */
export declare class LockLost extends Error {
  constructor(reason: string);
  /** lost, max_hold, expired, shutdown, released, lease_gone or disconnected. */
  readonly reason: string;
}

/** The one map from a problem code to its error class. */
export declare const ERRORS_BY_CODE: Readonly<Record<string, typeof SidelockError>>;
/** The typed error for a problem-details body answered with status. */
export declare function errorFor(status: number, problem: Problem | Record<string, unknown>): SidelockError;
/** A duration as sent: strings as they are, seconds as "Ns" or "Nms". */
export declare function goDuration(d: Duration): string;
/** A Go duration or seconds, in milliseconds. */
export declare function durationMs(d: Duration): number;
/** The URL path of a lock: the name as one escaped segment (its '/' as %2F). */
export declare function lockPath(name: string): string;
/** The URL path of a semaphore, escaped as a lock's. */
export declare function semaphorePath(name: string): string;
/** The URL path of a read/write lock, escaped as a lock's. */
export declare function rwlockPath(name: string): string;
/** The URL path of a lock set: each name escaped as a lock's, joined by ",". */
export declare function lockSetPath(names: Names): string;
/** One event of a watch as a Change. */
export declare function parseChange(kind: string, data: Record<string, unknown>): Change;
/** Events of a text/event-stream body (a node:http response, a fetch body: any async iterable of bytes); a retry
 * field goes to onRetry. */
export declare function readEvents(
  body: AsyncIterable<Uint8Array>,
  options?: { onRetry?: (ms: number) => void },
): AsyncGenerator<{ event: string; data: string; id?: string }, void, void>;

export interface ClientOptions {
  /** Default: $SIDELOCK_ADDR, else http://127.0.0.1:7420. */
  baseUrl?: string;
  /** Sent as a bearer token when set. Default: $SIDELOCK_API_TOKEN. */
  apiToken?: string;
  /** Bounds each request, on top of the wait it asks for. Default 10000. */
  timeoutMs?: number;
}

export interface AcquireOptions {
  /** The lease's ttl (default: the sidecar's, 30s). */
  ttl?: Duration;
  /** How long to wait while another owner holds it (default: try once). */
  wait?: Duration;
  /** A label for humans, shown by inspect. */
  owner?: string;
  /** Ends the lease whatever happens, with a lost "max_hold". */
  maxHold?: Duration;
  /** A random UUID per logical operation: a retried acquire gets the same lease back. Not with hold. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface LockOptions extends Omit<AcquireOptions, "idempotencyKey"> {
  /** Hold the lock over an event stream instead of heartbeats. */
  hold?: boolean;
  /** Called once when the lock is lost, with the reason. */
  onLost?: (reason: string) => void;
}

export interface CampaignOptions extends Omit<LockOptions, "hold" | "wait" | "owner"> {
  /** Names this candidate to everyone who watches the lock or asks leader(). */
  owner: string;
  /** How long each attempt waits in the sidecar's queue (default 10s; within SIDELOCK_MAX_WAIT). */
  wait?: Duration;
}

/** A lock (or a lock set, a semaphore's permit, a read/write lock's read or write) kept alive until released. */
export declare class KeptLock {
  /** The latest lease: validUntil moves with each renewal. */
  readonly lease: Lease;
  readonly name: string;
  readonly token: string;
  readonly fence: number;
  /** A semaphore's N (undefined for a lock). */
  readonly permits: number | undefined;
  /** Which of a semaphore's N slots this permit holds, or a reader's slot (undefined for a lock). */
  readonly slot: number | undefined;
  /** A read/write lock's side (undefined for a lock or a permit). */
  readonly mode: Mode | undefined;
  /** A lock set's locks, each with its fence (undefined for anything else); the set is lost whole when one ends. */
  readonly locks: SetLock[] | undefined;
  readonly validUntil: Date;
  /** Aborts, with a LockLost, when the lock is lost (not when released). */
  readonly signal: AbortSignal;
  readonly lostReason: string | undefined;
  readonly released: boolean;
  /** True while the lock is held and validUntil has not passed. */
  valid(): boolean;
  /** Push the lease out now (with a new ttl when given): the fresh lease. Rejects with LeaseGone (and marks the lock
   * lost) once the token no longer holds it. */
  extend(ttl?: Duration): Promise<Lease>;
  /** Give the lock up (once; later calls do nothing). */
  release(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}
/** A lease extended by heartbeats. */
export declare class HeartbeatLock extends KeptLock {}
/** A lock held over a server-sent events stream. */
export declare class HeldLock extends KeptLock {}

/** A client of one sidecar; requests reuse kept-alive connections (an undici Pool of its own). */
export declare class Client {
  constructor(options?: ClientOptions);
  readonly baseUrl: string;
  /** Close the kept-alive connections once the requests in flight are answered; the client cannot be used after. */
  close(): Promise<void>;
  /** Take the lock; rejects with LockHeld when still held after the wait. */
  acquire(name: string, options?: AcquireOptions): Promise<Lease>;
  /** The heartbeat: push the lease out (by ttl when given). */
  extend(name: string, token: string, options?: { ttl?: Duration; signal?: AbortSignal; timeoutMs?: number }): Promise<Lease>;
  /** Give the lock up; rejects with LeaseGone if the token no longer held it. */
  release(name: string, token: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Who holds the lock now. */
  inspect(name: string, options?: { signal?: AbortSignal }): Promise<Status>;
  /** Acquire and keep the lock alive until released. */
  lock(name: string, options?: LockOptions): Promise<KeptLock>;
  /** Run fn holding the lock; released when fn settles. */
  withLock<T>(name: string, options: LockOptions, fn: (lock: KeptLock) => T | Promise<T>): Promise<T>;

  /** Take one of the semaphore's permits; rejects with LockHeld when all are still held after the wait,
   * PermitsMismatch when this sidecar's callers of the semaphore gave another permits. */
  acquireSemaphore(name: string, permits: number, options?: AcquireOptions): Promise<Lease>;
  /** The heartbeat of a permit. */
  extendSemaphore(name: string, token: string, options?: { ttl?: Duration; signal?: AbortSignal; timeoutMs?: number }): Promise<Lease>;
  /** Give the permit up; rejects with LeaseGone if the token no longer held it. */
  releaseSemaphore(name: string, token: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Who holds the semaphore's permits now. */
  inspectSemaphore(name: string, permits: number, options?: { signal?: AbortSignal }): Promise<SemaphoreStatus>;
  /** Take a permit and keep it alive until released. */
  semaphore(name: string, permits: number, options?: LockOptions): Promise<KeptLock>;
  /** Run fn holding a permit; released when fn settles. */
  withSemaphore<T>(name: string, permits: number, options: LockOptions, fn: (permit: KeptLock) => T | Promise<T>): Promise<T>;

  /** Read ("shared") or write ("exclusive") the lock; rejects with LockHeld when the other side still holds it after
   * the wait. */
  acquireRWLock(name: string, mode: Mode, options?: AcquireOptions): Promise<Lease>;
  /** The heartbeat of a reader or the writer. */
  extendRWLock(name: string, token: string, options?: { ttl?: Duration; signal?: AbortSignal; timeoutMs?: number }): Promise<Lease>;
  /** Give the read or the write up; rejects with LeaseGone if the token no longer held it. */
  releaseRWLock(name: string, token: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Who reads or writes the lock now, and whether a writer waits. */
  inspectRWLock(name: string, options?: { signal?: AbortSignal }): Promise<RWLockStatus>;
  /** Read or write the lock and keep it alive until released. */
  rwlock(name: string, mode: Mode, options?: LockOptions): Promise<KeptLock>;
  /** Run fn reading or writing the lock; released when fn settles. */
  withRWLock<T>(name: string, mode: Mode, options: LockOptions, fn: (lock: KeptLock) => T | Promise<T>): Promise<T>;

  /** Take every lock of the set, all or nothing; rejects with LockHeld when one is still held after the wait,
   * SetChanged when one ended while the set was being taken (none is held either way). */
  acquireLockSet(names: Names, options?: AcquireOptions): Promise<Lease>;
  /** The heartbeat of the whole set. */
  extendLockSet(names: Names, token: string, options?: { ttl?: Duration; signal?: AbortSignal; timeoutMs?: number }): Promise<Lease>;
  /** Give every lock of the set up; rejects with LeaseGone if the token no longer held it. */
  releaseLockSet(names: Names, token: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Who holds each lock of the set now. */
  inspectLockSet(names: Names, options?: { signal?: AbortSignal }): Promise<LockSetStatus>;
  /** Take every lock of the set and keep them alive until released. */
  lockSet(names: Names, options?: LockOptions): Promise<KeptLock>;
  /** Run fn holding every lock of the set; released when fn settles. */
  withLockSet<T>(names: Names, options: LockOptions, fn: (set: KeptLock) => T | Promise<T>): Promise<T>;

  /** The changes of the lock, a "state" first, until signal aborts or the loop stops; reconnects a broken stream. */
  watch(name: string, options?: { signal?: AbortSignal }): AsyncGenerator<Change, void, void>;
  /** Hold the lock over a stream with wait, retrying on LockHeld until elected (or signal aborts): the term. */
  campaign(name: string, options: CampaignOptions): Promise<HeldLock>;
  /** The owner of the lock now, or undefined when nobody holds it. */
  leader(name: string, options?: { signal?: AbortSignal }): Promise<string | undefined>;
}
