package redisnode

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Which server each command connection reached (redlock.ServerTracker).
//
// A new connection is named (CLIENT SETNAME) as it is dialled; INFO server
// goes in the same round trip and tells which server process answers it
// (its run id). The health checker's verdict on a master holds over the
// connections it was judged with; a connection opened since, say after a
// timed-out call dropped one, would otherwise not count until another
// health round judged it, which on a starved sidecar can take longer than
// a try-once acquire waits. When every connection opened since reached
// the run id that was judged, no restart happened behind them, and their
// answers count at once.

// recentConnections is how many connections' servers are remembered: a
// verdict older than that many reconnects is judged again by a round.
const recentConnections = 64

// connections counts the command connections dialled and remembers which
// server the most recent ones reached.
type connections struct {
	opened atomic.Uint64 // read without the lock on every answer
	// notify is told of every connection counted.
	notify atomic.Pointer[func()]

	mu      sync.Mutex
	servers [recentConnections]server // servers[k % recentConnections]: connection k's
}

// server is what a connection reached: the server's run id, "" until known
// and for good when INFO was refused or unreadable; or nothing, when the
// connection failed as it was set up and so never carried an answer.
type server struct {
	runID  string
	failed bool
}

// onConnect counts a new connection (before anything can fail, so that a
// connection that then fails still makes the health checker judge the
// master again), tells notify, and names it with CLIENT SETNAME while
// reading INFO server in the same round trip. A refused name or INFO
// leaves the connection in use, unnamed or of an unknown server (see
// nameConnection); a missing answer to either fails the dial, as the
// connection may still have a reply on its way.
func (c *connections) onConnect(name string) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		k := c.open()
		if f := c.notify.Load(); f != nil {
			(*f)()
		}
		var setName *redis.BoolCmd
		var info *redis.StringCmd
		_, _ = cn.Pipelined(ctx, func(p redis.Pipeliner) error {
			setName = p.ClientSetName(ctx, name)
			info = p.Info(ctx, "server")
			return nil
		})
		for _, err := range []error{setName.Err(), info.Err()} {
			if err != nil && !isRefusal(err) { // no answer: the connection is unusable
				c.reached(k, server{failed: true})
				return err
			}
		}
		if info.Err() == nil {
			c.reached(k, server{runID: infoFields(info.Val())["run_id"]})
		}
		return nil
	}
}

// open counts a connection and returns its number (1 for the first).
func (c *connections) open() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.opened.Add(1)
	c.servers[k%recentConnections] = server{}
	return k
}

// reached records what connection k reached.
func (c *connections) reached(k uint64, s server) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.opened.Load()-k < recentConnections {
		c.servers[k%recentConnections] = s
	}
}

// reachedSince reports whether every connection after the first since
// reached the server runID, leaving out those that failed as they were set
// up (no answer ever came over them).
func (c *connections) reachedSince(since uint64, runID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	opened := c.opened.Load()
	if runID == "" || since > opened || opened-since > recentConnections {
		return false
	}
	for k := since + 1; k <= opened; k++ {
		if s := c.servers[k%recentConnections]; !s.failed && s.runID != runID {
			return false
		}
	}
	return true
}

// isRefusal reports whether err is the server's error reply (a command
// the server or an ACL refuses), not a failure to get an answer.
func isRefusal(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}
