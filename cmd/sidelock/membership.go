package main

import (
	"github.com/sidelock/sidelock/internal/config"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/membership"
)

// Every group's master list is recorded on its masters (package
// membership), at start-up and then every membershipEvery, so that a
// rollout that replaces a master of a named group in one step is noticed
// instead of splitting the group's quorum: a sidecar refuses to start on a
// list whose majorities need not meet a list other sidecars run, and a
// running sidecar that finds such a list keeps the group out of service
// (503, /readyz) until it is gone.
const membershipEvery = 10 * time.Second

// membershipTTL is how long a record outlives its last check: past every
// check interval (with room for one missed), and past the keys a sidecar
// on that list may have left on the masters.
func membershipTTL(c config.Config) time.Duration { return 3*membershipEvery + 2*c.KeyTTL }

// checkMembership records every group's list once; it refuses to start on
// a split and logs masters it could not ask.
func checkMembership(ctx context.Context, cfg config.Config, groups []quorumGroup, log *slog.Logger) error {
	var errs []error
	for _, g := range groups {
		if err := checkGroupMembership(ctx, cfg, g, log); errors.Is(err, membership.ErrSplitMembership) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	return nil
}

func checkGroupMembership(ctx context.Context, cfg config.Config, g quorumGroup, log *slog.Logger) error {
	res, err := membership.Check(ctx, cfg.KeyPrefix, g.name, g.addrs, g.nodes, membershipTTL(cfg), cfg.NodeTimeout*4)
	for _, f := range res.Unanswered {
		log.Debug("member list not recorded on a master", "group", g.name, "master", f.Addr, "err", f.Err)
	}
	return err
}

// watchMembership checks every membershipEvery until ctx ends, vetoing a
// group whose list is split and lifting the veto once it no longer is.
func watchMembership(ctx context.Context, cfg config.Config, groups []quorumGroup, checker *health.Checker, log *slog.Logger) {
	t := time.NewTicker(membershipEvery)
	defer t.Stop()
	vetoed := make([]bool, len(groups))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i, g := range groups {
			err := checkGroupMembership(ctx, cfg, g, log)
			split := errors.Is(err, membership.ErrSplitMembership)
			switch {
			case split && !vetoed[i]:
				log.Error("quorum group kept out of service: its master list is split", "group", g.name, "err", err)
				checker.Veto(i, err.Error())
			case !split && vetoed[i]:
				log.Info("quorum group back in service: no other master list is in use", "group", g.name)
				checker.Veto(i, "")
			}
			vetoed[i] = split
		}
	}
}
