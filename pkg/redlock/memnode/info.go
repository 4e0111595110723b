package memnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"
)

// ServerInfo mirrors redlock.ServerInfo field for field, so a caller turns
// it into one with a plain conversion, redlock.ServerInfo(info): memnode
// does not import redlock (see the package doc). A test in this package
// fails to compile if the two ever differ.
type ServerInfo struct {
	RunID            string
	Uptime           time.Duration
	Role             string
	PersistenceKnown bool
	AppendOnly       bool
	AppendFsync      string
}

// server is the identity of the simulated server process. The caller of
// its methods holds the node's mutex.
type server struct {
	runID     string
	startedAt time.Time
	override  func(ServerInfo) ServerInfo // see SetServerInfo
}

func newServer(now time.Time) server {
	return server{runID: randomRunID(), startedAt: now}
}

// randomRunID is 40 hex characters, like a Redis run_id: unique per start.
func randomRunID() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

// ServerInfo describes the simulated server: a run id chosen at New (or at
// the last Restart), the time since then on the node's clock, role
// "master", and persistence known to be off, as a Redis master with the
// default configuration would report. SetServerInfo can change any field.
// It fails like every other call while the node is down or closed.
func (n *Node) ServerInfo(ctx context.Context) (ServerInfo, error) {
	if err := n.enter(ctx, "info"); err != nil {
		return ServerInfo{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	info := ServerInfo{
		RunID:            n.server.runID,
		Uptime:           n.now().Sub(n.server.startedAt),
		Role:             "master",
		PersistenceKnown: true,
	}
	if n.server.override != nil {
		info = n.server.override(info)
	}
	return info, nil
}

// SetServerInfo makes ServerInfo pass what it would report through edit,
// so tests can simulate a replica, a durable master, unreadable settings or
// two nodes that are one server. nil removes the override. edit runs with
// the node's lock held and must not call the node.
func (n *Node) SetServerInfo(edit func(ServerInfo) ServerInfo) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.server.override = edit
}

// Restart simulates a master that crashed and came back without
// persistence: every key is forgotten, the run id changes and the uptime
// starts again from zero. Release watchers stay registered, as a Redis
// client resubscribes after reconnecting; SetDown, SetDelay and
// SetServerInfo settings are kept.
func (n *Node) Restart() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.entries)
	n.writesSinceSweep, n.keptByLastSweep = 0, 0
	override := n.server.override
	n.server = newServer(n.now())
	n.server.override = override
}
