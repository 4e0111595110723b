package health

import (
	"errors"
	"fmt"
)

// checkGroups validates the group layout, filling in the single group
// when none is given, and the default policy.
func checkGroups(nodes, quorum int, cfg *Config) error {
	if cfg.Groups == nil {
		if nodes == 0 || quorum < 1 || quorum > nodes {
			return errors.New("health: need at least one master and a quorum within their number")
		}
		cfg.Groups = []Group{{Size: nodes, Quorum: quorum}}
	}
	switch cfg.ReadyPolicy {
	case "":
		cfg.ReadyPolicy = ReadyAllGroups
	case ReadyAllGroups, ReadyAnyGroup:
	default:
		return fmt.Errorf("health: ready policy %q is not %q or %q", cfg.ReadyPolicy, ReadyAllGroups, ReadyAnyGroup)
	}
	total := 0
	for _, g := range cfg.Groups {
		if g.Size < 1 || g.Quorum < 1 || g.Quorum > g.Size {
			return fmt.Errorf("health: group %q needs at least one master and a quorum within their number", g.Name)
		}
		total += g.Size
	}
	if total != nodes {
		return fmt.Errorf("health: the groups hold %d masters, %d were given", total, nodes)
	}
	return nil
}

// summarise counts the masters up and eligible, per group, and decides
// readiness by the policy.
func (c *Checker) summarise(states []NodeState) Report {
	r := Report{Nodes: states}
	first := 0
	ready := 0
	for _, g := range c.cfg.Groups {
		gs := GroupState{Name: g.Name, Quorum: g.Quorum}
		for _, s := range states[first : first+g.Size] {
			gs.Masters = append(gs.Masters, s.Addr)
			if s.Up {
				gs.Up++
			}
			if s.Up && s.Eligible {
				gs.Eligible++
			}
		}
		first += g.Size
		gs.Ready = gs.Eligible >= g.Quorum
		if gs.Ready {
			ready++
		}
		r.Up += gs.Up
		r.Eligible += gs.Eligible
		r.Groups = append(r.Groups, gs)
	}
	if len(r.Groups) == 1 {
		r.Quorum, r.Ready, r.Groups = r.Groups[0].Quorum, r.Groups[0].Ready, nil
		return r
	}
	r.ReadyPolicy = c.cfg.ReadyPolicy
	r.Ready = ready == len(r.Groups) || (c.cfg.ReadyPolicy == ReadyAnyGroup && ready > 0)
	return r
}
