package shard

import (
	"context"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Tenures (redlock's tenure.go) live in a key's group. A key that is
// moving is neither taken as a tenure nor noted: Take answers
// ErrTenureUnsupported, and the caller acquires it through both groups
// (Acquire), with no block, no record and no linger.

// Take takes key in its group; a moving key answers ErrTenureUnsupported.
func (r *Router) Take(ctx context.Context, req redlock.TakeRequest) (redlock.Tenure, error) {
	home, prev := r.route(req.Key)
	if prev != nil {
		return redlock.Tenure{}, redlock.ErrTenureUnsupported
	}
	return home.Take(ctx, req)
}

// NoteHolder notes key's holder in its group (nothing for a moving key,
// which no tenure holds).
func (r *Router) NoteHolder(ctx context.Context, key string, rec redlock.HolderRecord, self string) (redlock.WaiterMark, error) {
	home, prev := r.route(key)
	if prev != nil {
		return redlock.WaiterMark{}, redlock.ErrTenureUnsupported
	}
	return home.NoteHolder(ctx, key, rec, self)
}

// ReleaseTenure releases key in its group, or in both while it moves
// (plain releases: a moving key holds no record).
func (r *Router) ReleaseTenure(ctx context.Context, key, value string, mark redlock.WaiterMark, notify string) error {
	home, prev := r.route(key)
	if prev != nil {
		return r.releaseBoth(ctx, home, prev, key, value)
	}
	return home.ReleaseTenure(ctx, key, value, mark, notify)
}

// RemoveMark removes a mark in key's group (and its previous group).
func (r *Router) RemoveMark(ctx context.Context, key, sidecar string) error {
	home, prev := r.route(key)
	if prev != nil {
		_ = prev.RemoveMark(ctx, key, sidecar)
	}
	return home.RemoveMark(ctx, key, sidecar)
}

// WatchChannel watches a sidecar's channel in every group: it holds keys
// in any of them.
func (r *Router) WatchChannel(channel string, notify func(redlock.Message)) (cancel func()) {
	var cancels []func()
	seen := map[*redlock.Locker]bool{}
	for _, g := range append(append([]*redlock.Locker(nil), r.current...), r.previous...) {
		if !seen[g] {
			seen[g] = true
			cancels = append(cancels, g.WatchChannel(channel, notify))
		}
	}
	return func() {
		for _, c := range cancels {
			c()
		}
	}
}
