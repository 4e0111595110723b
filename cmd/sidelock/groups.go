package main

import (
	"github.com/sidelock/sidelock/internal/config"

	"fmt"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/shard"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// quorumGroup is a group's masters and the Locker over them.
type quorumGroup struct {
	name   string
	addrs  []string // host:port (the nodes' names in dev mode)
	nodes  []redlock.Node
	locker *redlock.Locker
}

// buildGroups connects to every group's masters. The groups built so far
// are returned with an error, for closing.
func buildGroups(cfg config.Config, specs []config.GroupSpec) ([]quorumGroup, error) {
	if cfg.Dev {
		specs = []config.GroupSpec{{Name: "memory"}}
	}
	groups := make([]quorumGroup, 0, len(specs))
	for _, spec := range specs {
		nodes, err := buildNodes(cfg, spec.Masters)
		if err != nil {
			return groups, err
		}
		addrs := spec.Addrs()
		if cfg.Dev {
			addrs = nil
			for _, n := range nodes {
				addrs = append(addrs, n.Addr())
			}
		}
		groups = append(groups, quorumGroup{name: spec.Name, addrs: addrs, nodes: nodes})
		l, err := redlock.New(nodes, redlock.Config{
			NodeTimeout: cfg.NodeTimeout, DriftFactor: cfg.DriftFactor, Fencing: cfg.Fencing, FenceRetention: cfg.FenceRetention,
		})
		if err != nil {
			return groups, fmt.Errorf("group %q: %w", spec.Name, err)
		}
		groups[len(groups)-1].locker = l
	}
	return groups, nil
}

func closeGroups(groups []quorumGroup) {
	for _, g := range groups {
		for _, n := range g.nodes {
			_ = n.Close()
		}
	}
}

// allNodes lists every group's masters, one group after another (the
// order health.Config.Groups describes).
func allNodes(groups []quorumGroup) []redlock.Node {
	var nodes []redlock.Node
	for _, g := range groups {
		nodes = append(nodes, g.nodes...)
	}
	return nodes
}

// newLocker is the one group's Locker, or a router over the groups.
func newLocker(groups []quorumGroup, current, previous []config.GroupSpec) (lease.Locker, error) {
	if len(groups) == 1 {
		return groups[0].locker, nil
	}
	byName := map[string]*redlock.Locker{}
	for _, g := range groups {
		byName[g.name] = g.locker
	}
	shardGroups := func(specs []config.GroupSpec) []shard.Group {
		out := make([]shard.Group, len(specs))
		for i, s := range specs {
			out[i] = shard.Group{Name: s.Name, Locker: byName[s.Name]}
		}
		return out
	}
	return shard.New(shardGroups(current), shardGroups(previous))
}

// healthGroups describes the groups to the health checker (nil for one).
func healthGroups(groups []quorumGroup) []health.Group {
	if len(groups) == 1 {
		return nil
	}
	out := make([]health.Group, len(groups))
	for i, g := range groups {
		out[i] = health.Group{Name: g.name, Size: len(g.nodes), Quorum: g.locker.Quorum()}
	}
	return out
}

// setEligible routes the guards' verdict on master i (in allNodes order)
// to its group's Locker.
func setEligible(groups []quorumGroup) func(i int, e redlock.Eligibility) {
	return func(i int, e redlock.Eligibility) {
		for _, g := range groups {
			if i < len(g.nodes) {
				g.locker.SetEligibility(i, e)
				return
			}
			i -= len(g.nodes)
		}
	}
}
