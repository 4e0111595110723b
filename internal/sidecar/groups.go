package sidecar

import (
	"fmt"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/shard"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// A quorum group at run time is its *redlock.Locker: it carries the
// group's name, its masters, its quorum and the health checker's verdict
// on each master. config.GroupSpec is the group as configured.

// buildGroups connects to every group's masters (or takes WithNodes')
// and puts a Locker over each. The groups built so far are returned with an error, for closing.
func (c *Core) buildGroups(specs []config.GroupSpec) ([]*redlock.Locker, error) {
	cfg := c.cfg
	if cfg.Dev && c.opts.nodes == nil {
		specs = []config.GroupSpec{{Name: "memory"}}
	}
	groups := make([]*redlock.Locker, 0, len(specs))
	for _, spec := range specs {
		nodes, err := c.opts.nodes, error(nil)
		if nodes == nil {
			nodes, err = buildNodes(cfg, spec.Masters)
		}
		if err != nil {
			return groups, err
		}
		l, err := redlock.New(nodes, redlock.Config{
			Name: spec.Name, NodeTimeout: cfg.NodeTimeout, DriftFactor: cfg.DriftFactor, Fencing: cfg.Fencing, FenceRetention: cfg.FenceRetention,
			Excluders: lease.Excluders(cfg.KeyPrefix),
			Now:       c.opts.redlockNow,
		})
		if err != nil {
			closeNodes(nodes)
			return groups, fmt.Errorf("group %q: %w", spec.Name, err)
		}
		groups = append(groups, l)
	}
	return groups, nil
}

// buildNodes connects to the masters (in-memory ones in dev mode). A node
// is given the master's host:port alone, as that is what it shows in
// health reports, metric labels and member lists; its credentials go to
// AUTH only.
func buildNodes(cfg config.Config, masters []config.MasterAddr) ([]redlock.Node, error) {
	if cfg.Dev {
		nodes := make([]redlock.Node, config.DevMasters)
		for i := range nodes {
			nodes[i] = memnode.New(fmt.Sprintf("memory-%d", i+1))
		}
		return nodes, nil
	}
	tlsCfg, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	nodes := make([]redlock.Node, len(masters))
	for i, m := range masters {
		username, password := m.Credentials(cfg)
		nodes[i] = redisnode.New(redisnode.Options{
			Addr: m.String(), Username: username, Password: password, TLS: tlsCfg,
			MaxConns: cfg.RedisMaxConns,
		})
	}
	return nodes, nil
}

func closeNodes(nodes []redlock.Node) {
	for _, n := range nodes {
		_ = n.Close()
	}
}

// newLocker is the one group's Locker, or a router over the groups
// (current, migrating from previous).
func newLocker(groups []*redlock.Locker, current, previous []config.GroupSpec) (lease.Locker, error) {
	if len(groups) == 1 {
		return groups[0], nil
	}
	byName := map[string]*redlock.Locker{}
	for _, g := range groups {
		byName[g.Name()] = g
	}
	pick := func(specs []config.GroupSpec) []*redlock.Locker {
		out := make([]*redlock.Locker, len(specs))
		for i, s := range specs {
			out[i] = byName[s.Name]
		}
		return out
	}
	return shard.New(pick(current), pick(previous))
}
