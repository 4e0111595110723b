package health

import (
	"errors"
	"fmt"
	"slices"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// checkGroups validates the groups and fills in the default policy.
// redlock.New has made sure that each has masters and a quorum within
// their number.
func checkGroups(groups []*redlock.Locker, cfg *Config) error {
	if len(groups) == 0 {
		return errors.New("health: need at least one quorum group")
	}
	for i, g := range groups {
		if g == nil {
			return fmt.Errorf("health: group %d is nil", i)
		}
		if slices.Contains(groups[:i], g) {
			return fmt.Errorf("health: group %q is given twice", g.Name())
		}
	}
	switch cfg.ReadyPolicy {
	case "":
		cfg.ReadyPolicy = ReadyAllGroups
	case ReadyAllGroups, ReadyAnyGroup:
	default:
		return fmt.Errorf("health: ready policy %q is not %q or %q", cfg.ReadyPolicy, ReadyAllGroups, ReadyAnyGroup)
	}
	return nil
}

// summarise counts the masters up and eligible, per group, and decides
// readiness by the policy.
func (c *Checker) summarise(states []NodeState) Report {
	r := Report{Nodes: states, Groups: make([]GroupState, len(c.groups))}
	for g, l := range c.groups {
		r.Groups[g] = GroupState{Name: l.Name(), Quorum: l.Quorum()}
	}
	for i, s := range states {
		gs := &r.Groups[c.at[i].group]
		gs.Masters = append(gs.Masters, s.Addr)
		if s.Up {
			gs.Up++
		}
		if s.Up && s.Eligible {
			gs.Eligible++
		}
	}
	ready := 0
	for g := range r.Groups {
		gs := &r.Groups[g]
		gs.Ready = gs.Eligible >= gs.Quorum
		if gs.Ready {
			ready++
		}
		r.Up += gs.Up
		r.Eligible += gs.Eligible
	}
	if len(r.Groups) == 1 {
		r.Quorum, r.Ready, r.Groups = r.Groups[0].Quorum, r.Groups[0].Ready, nil
		return r
	}
	r.ReadyPolicy = c.cfg.ReadyPolicy
	r.Ready = ready == len(r.Groups) || (c.cfg.ReadyPolicy == ReadyAnyGroup && ready > 0)
	return r
}
