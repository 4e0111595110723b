package redisnode

import "time"

// Stats is a snapshot of a Node's connections and pipelining, for metrics.
// The gauges are read at the moment of the call; the totals count from New.
type Stats struct {
	// CommandConns is the number of open command connections (regular
	// and pipeline pools, busy or idle): at most Options.MaxConns.
	CommandConns int
	// IdleConns is how many of the CommandConns are idle.
	IdleConns int
	// Subscriptions is the number of open Pub/Sub connections: 0 before
	// the first watch and while the master cannot be reached, else 1. It
	// stays 1 while no key is watched: the connection is kept for the next.
	Subscriptions int

	// InFlightPipelines is the number of pipeline slots in use: batches
	// of lock calls being sent (at most Options.MaxConns-1).
	InFlightPipelines int
	// QueuedCalls is the number of lock calls waiting for a free slot.
	QueuedCalls int

	// Calls and Batches count the lock calls sent and the batches they
	// were sent in; Calls/Batches is how many calls share a round trip.
	Calls, Batches uint64
	// QueueWait is the total time the sent calls waited, from being
	// queued to their batch being sent.
	QueueWait time.Duration
}

// Stats reports the Node's connections and pipelining. It takes no lock
// that a lock call holds for more than a moment, so scraping it is cheap.
func (n *Node) Stats() Stats {
	pools := n.client.PoolStats()
	s := Stats{
		CommandConns: int(pools.TotalConns),
		IdleConns:    int(pools.IdleConns),
		// The subscriber client's Pub/Sub pool counts a connection from
		// its dial to its close, across go-redis's redials. The watch
		// registry would not do: it holds the PubSub, which dials only
		// with its first SUBSCRIBE and may be between connections.
		Subscriptions:     int(n.subscriber.PoolStats().PubSubStats.Active),
		InFlightPipelines: n.pipe.inFlight(),
		QueuedCalls:       n.pipe.pending(),
		Calls:             n.pipe.calls.Load(),
		Batches:           n.pipe.batches.Load(),
		QueueWait:         time.Duration(n.pipe.queueWait.Load()),
	}
	if p := pools.PipelineStats; p != nil {
		s.CommandConns += int(p.TotalConns)
		s.IdleConns += int(p.IdleConns)
	}
	return s
}
