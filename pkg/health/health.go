// Package health tells whether a quorum of masters answers: it pings every
// master in the background and keeps the last result for /readyz and the
// metrics. It changes no lock and does not gate lock operations, which find
// out for themselves within the node timeout.
package health

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// NodeState is one master's last ping.
type NodeState struct {
	Addr      string        `json:"addr"`
	Up        bool          `json:"up"`
	Latency   time.Duration `json:"-"`
	Error     string        `json:"error,omitempty"`
	CheckedAt time.Time     `json:"checked_at"`
}

// Report is the state of every master and whether they make a quorum.
type Report struct {
	Ready  bool        `json:"ready"`
	Quorum int         `json:"quorum"`
	Up     int         `json:"up"`
	Nodes  []NodeState `json:"masters"`
}

// Config tunes the checker.
type Config struct {
	Interval time.Duration // between rounds (default 1s)
	Timeout  time.Duration // per ping (default: the node timeout)
	Now      func() time.Time
	// OnChange, if set, is called after a round in which a master went up
	// or down, with the previous and the new report (for logging).
	OnChange func(prev, cur Report)
}

// Checker pings the masters. Report is safe for concurrent use.
type Checker struct {
	nodes  []redlock.Node
	quorum int
	cfg    Config

	mu   sync.RWMutex
	last Report
}

// New returns a Checker of nodes, ready when quorum of them answer.
func New(nodes []redlock.Node, quorum int, cfg Config) (*Checker, error) {
	if len(nodes) == 0 || quorum < 1 || quorum > len(nodes) {
		return nil, errors.New("health: need at least one master and a quorum within their number")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 50 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Checker{nodes: nodes, quorum: quorum, cfg: cfg}
	c.last = Report{Quorum: quorum, Nodes: make([]NodeState, len(nodes))}
	for i, n := range nodes {
		c.last.Nodes[i] = NodeState{Addr: n.Addr(), Error: "not checked yet"}
	}
	return c, nil
}

// Run checks at once, then every interval, until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check pings every master once, in parallel, and records the result.
func (c *Checker) Check(ctx context.Context) Report {
	states := make([]NodeState, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { states[i] = c.ping(ctx, n) })
	}
	wg.Wait()
	r := Report{Quorum: c.quorum, Nodes: states}
	for _, s := range states {
		if s.Up {
			r.Up++
		}
	}
	r.Ready = r.Up >= c.quorum
	c.mu.Lock()
	prev := c.last
	c.last = r
	c.mu.Unlock()
	if c.cfg.OnChange != nil && changed(prev, r) {
		c.cfg.OnChange(prev, r)
	}
	return r
}

func (c *Checker) ping(ctx context.Context, n redlock.Node) NodeState {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	start := c.cfg.Now()
	err := n.Ping(ctx)
	s := NodeState{Addr: n.Addr(), Up: err == nil, Latency: c.cfg.Now().Sub(start), CheckedAt: c.cfg.Now().UTC()}
	if err != nil {
		s.Error = err.Error()
	}
	return s
}

// Report returns the last round's result (not ready before the first).
func (c *Checker) Report() Report {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r := c.last
	r.Nodes = append([]NodeState(nil), r.Nodes...)
	return r
}

func changed(prev, cur Report) bool {
	for i := range cur.Nodes {
		if prev.Nodes[i].Up != cur.Nodes[i].Up {
			return true
		}
	}
	return prev.Ready != cur.Ready
}
