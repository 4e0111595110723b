package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/membership"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// MembershipEvery is how often every group's master list is recorded on
// its masters (package membership), after start-up, so that a
// rollout that replaces a master of a named group in one step is noticed
// instead of splitting the group's quorum: a sidecar refuses to start on a
// list whose majorities need not meet a list other sidecars run, and a
// running sidecar that finds such a list keeps the group out of service
// (503, /readyz) until it is gone.
const MembershipEvery = 10 * time.Second

// MembershipTTL is how long a record outlives its last check: past every
// check interval (with room for one missed), and past the keys a sidecar
// on that list may have left on the masters.
func MembershipTTL(c config.Config) time.Duration { return 3*MembershipEvery + 2*c.KeyTTL }

// checkMembership records every group's list once; it refuses to start on
// a split and logs masters it could not ask.
func (s *Core) checkMembership(ctx context.Context) error {
	var errs []error
	for _, g := range s.groups {
		if err := s.checkGroupMembership(ctx, g); errors.Is(err, membership.ErrSplitMembership) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	return nil
}

// checkGroupMembership records g's list, its masters by host:port (the
// names its nodes go by), on g's masters.
func (s *Core) checkGroupMembership(ctx context.Context, g *redlock.Locker) error {
	nodes := g.Nodes()
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	res, err := membership.Check(ctx, s.cfg.KeyPrefix, g.Name(), addrs, nodes, MembershipTTL(s.cfg), s.cfg.NodeTimeout*4)
	for _, f := range res.Unanswered {
		s.log.Debug("member list not recorded on a master", "group", g.Name(), "master", f.Addr, "err", f.Err)
	}
	return err
}

// watchMembership checks every MembershipEvery until ctx ends, vetoing a
// group whose list is split and lifting the veto once it no longer is.
func (s *Core) watchMembership(ctx context.Context) {
	t := time.NewTicker(MembershipEvery)
	defer t.Stop()
	vetoed := make([]bool, len(s.groups))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i, g := range s.groups {
			err := s.checkGroupMembership(ctx, g)
			split := errors.Is(err, membership.ErrSplitMembership)
			switch {
			case split && !vetoed[i]:
				s.log.Error("quorum group kept out of service: its master list is split", "group", g.Name(), "err", err)
				s.checker.Veto(i, err.Error())
			case !split && vetoed[i]:
				s.log.Info("quorum group back in service: no other master list is in use", "group", g.Name())
				s.checker.Veto(i, "")
			}
			vetoed[i] = split
		}
	}
}
