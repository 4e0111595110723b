package redlock

import (
	"context"
	"time"
)

// Node is one independent lock master as the algorithm sees it: a Redis
// master in production, an in-memory map in dev mode and fast tests. Every
// implementation must pass the conformance suite in package nodetest.
//
// Every method is bounded by ctx; the algorithm gives each call the per-node
// timeout. Values are opaque strings chosen by the caller; a node never
// interprets them.
type Node interface {
	// Addr names the node in health reports, metrics and errors.
	Addr() string

	// Acquire sets key to value with the given ttl when key is absent, and
	// refreshes the ttl when key already holds value (so a retried call is
	// idempotent). When another value holds key it returns acquired=false and
	// the holder's remaining ttl (0 when the key has no expiry).
	Acquire(ctx context.Context, key, value string, ttl time.Duration) (acquired bool, holderTTL time.Duration, err error)

	// Extend resets key's ttl when it holds value (ExtendRenewed). When key
	// is absent (it expired, was evicted, or the node restarted empty) it
	// writes nothing and answers ExtendMissing: the lock may have been free,
	// and granted and released meanwhile, so only a round that still has a
	// quorum of renewals may put the key back (see Locker.Extend).
	// ExtendHeldByOther when another value holds key.
	Extend(ctx context.Context, key, value string, ttl time.Duration) (ExtendOutcome, error)

	// Release deletes key when it holds value and reports whether it did.
	Release(ctx context.Context, key, value string) (bool, error)

	// Get returns key's value and remaining ttl, or "" when key is absent.
	Get(ctx context.Context, key string) (value string, ttl time.Duration, err error)

	// Ping checks that the node answers.
	Ping(ctx context.Context) error

	// Close frees the node's connections.
	Close() error
}

// ExtendOutcome is what one master did with an Extend. It is an alias of
// int8, as ExtendItem is of a plain struct, so nodes can implement Node
// without importing this package (memnode does not).
type ExtendOutcome = int8

// Extend outcomes (the numbers the Redis scripts return).
const (
	ExtendHeldByOther ExtendOutcome = 0 // another value holds the key
	ExtendRenewed     ExtendOutcome = 1 // value held the key; its ttl was reset
	ExtendMissing     ExtendOutcome = 2 // the key was absent; nothing was written
)

// ReleaseWatcher is implemented by nodes that announce releases. Announcements
// are best-effort: callers must also poll or time out.
//
// Only a Release that deleted the key is announced, not an expiry. A watch
// may take a moment (a round trip) to become active after WatchReleases
// returns, and announcements made while a node is unreachable are lost.
type ReleaseWatcher interface {
	// WatchReleases calls notify (from any goroutine; it must not block) each time
	// key is released on this node, until cancel is called. cancel is idempotent.
	//
	// As with time.AfterFunc's Stop, a call already being delivered when
	// cancel runs may still happen after cancel returns; no later ones do.
	WatchReleases(key string, notify func()) (cancel func())
}

// ServerInfo describes the server behind a node, for the safety guards
// (restart probation, persistence warnings, independence checks).
type ServerInfo struct {
	// RunID is unique per server process start: two nodes reporting the
	// same RunID are one server under two addresses.
	RunID string
	// Uptime is how long the server process has run.
	Uptime time.Duration
	// Role is "master" for an independent master, "slave" (Redis's word)
	// for a replica, whose keys would follow another master's.
	Role string
	// PersistenceKnown is false when the server's configuration cannot be
	// read (CONFIG disabled or denied by ACL); the fields below are then zero.
	PersistenceKnown bool
	// AppendOnly and AppendFsync are the server's append-only-file settings.
	// Only AppendOnly with AppendFsync "always" keeps every acknowledged write
	// across a crash.
	AppendOnly  bool
	AppendFsync string
}

// Durable reports whether every acknowledged write survives a crash.
func (s ServerInfo) Durable() bool {
	return s.PersistenceKnown && s.AppendOnly && s.AppendFsync == "always"
}

// ServerInfoReader is implemented by nodes that can describe their server.
type ServerInfoReader interface {
	ServerInfo(ctx context.Context) (ServerInfo, error)
}

// ConnectionCounter is implemented by nodes that count the connections
// they have opened. A server that restarts breaks every connection to it,
// so while the count stands still no restart happened behind a direct
// connection: the health checker then trusts the server info it last read
// and only pings.
type ConnectionCounter interface {
	ConnectionsOpened() uint64
}

// ServerTracker is implemented by connection counters that also learn, as
// they open each connection, which server process answers it: its run id,
// as ServerInfo reports it. A restart changes the run id, so a guard's
// verdict on a server (Eligibility.RunID) holds over new connections that
// reached that same server: a connection dropped by a timed-out call and
// opened again needs no health round before its answers count.
type ServerTracker interface {
	ConnectionCounter
	// ReachedSince reports whether every connection opened after the
	// first since ones is known to have reached the server runID (false
	// for an empty runID, or one the node could not read).
	ReachedSince(since uint64, runID string) bool
}

// Fencer is implemented by nodes that keep fence counters; both shipped
// nodes do, and a Locker with fencing on requires it of every node. A
// node keeps one counter per lock, at a fence key of its own.
type Fencer interface {
	// AcquireFenced is Acquire that, when value holds key afterwards, also
	// returns the fence floor: the larger of the counter at fenceKey and
	// the node's clock in microseconds. Reading the floor in the same
	// atomic step as the acquisition is what makes fences monotonic.
	AcquireFenced(ctx context.Context, key, fenceKey, value string, ttl time.Duration) (acquired bool, holderTTL time.Duration, floor int64, err error)

	// CommitFence raises the counter at fenceKey to fence (keeping the
	// larger) and sets its ttl to retention, only while key holds value.
	CommitFence(ctx context.Context, key, fenceKey, value string, fence int64, retention time.Duration) (bool, error)

	// GetFenced is Get that also returns the counter at fenceKey (0 when
	// absent).
	GetFenced(ctx context.Context, key, fenceKey string) (value string, ttl time.Duration, fence int64, err error)
}

// OneRoundFencer is implemented by Fencers that can also take a key and
// commit its fence in one atomic step. The Locker then grants a fenced key
// in one round instead of two: with a single master always (that master is
// the whole majority, so a fence committed while it takes the key is final
// at once), with several whenever a majority commits the Locker's proposal
// (see fence.go).
type OneRoundFencer interface {
	Fencer
	// AcquireCommitted is AcquireFenced that, when value holds key
	// afterwards, also raises the counter at fenceKey to the fence
	// max(floor, above)+1, with ttl retention, in the same atomic step,
	// and returns that fence.
	AcquireCommitted(ctx context.Context, key, fenceKey, value string, ttl time.Duration, above int64, retention time.Duration) (acquired bool, holderTTL time.Duration, fence int64, err error)

	// AcquireProposed is AcquireFenced that, when value holds key
	// afterwards and proposal is above the floor, also raises the counter
	// at fenceKey to proposal, with ttl retention, in the same atomic step
	// (Proposal.Committed, with the counter it replaced in Prev);
	// otherwise it returns the floor and leaves the counter untouched.
	// With several masters a grant whose majority all committed one
	// proposal needs no commit round (see fence.go).
	AcquireProposed(ctx context.Context, key, fenceKey, value string, ttl time.Duration, proposal int64, retention time.Duration) (Proposal, error)

	// WithdrawProposal is Release that, when it deletes key and the
	// counter at fenceKey is still proposal, also puts back prev (ttl
	// retention; prev 0 deletes the counter). A failed grant takes back
	// the proposals it committed, so that they never show as a later
	// holder's fence. Safe: nothing else moves the counter while value
	// holds key, and the withdrawn proposal was never a final fence.
	WithdrawProposal(ctx context.Context, key, fenceKey, value string, proposal, prev int64, retention time.Duration) (bool, error)
}

// Proposal is a master's answer to OneRoundFencer.AcquireProposed. An
// alias of a struct type, so that memnode can mirror it without importing
// this package (as it mirrors ExtendItem).
type Proposal = struct {
	Acquired  bool
	HolderTTL time.Duration // when another value holds the key
	Fence     int64         // the proposal when Committed, else the floor read
	Committed bool
	Prev      int64 // the counter the committed proposal replaced (0: none)
}
