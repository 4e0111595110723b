package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// watchOptions are the flags and argument of `sidelock watch`.
type watchOptions struct {
	sidecar sidecarFlags
	once    bool
	name    string
}

func parseWatch(args []string, getenv func(string) string, stdout io.Writer) (watchOptions, error) {
	var o watchOptions
	fs := newFlags("watch")
	o.sidecar.addAPI(fs, getenv)
	fs.BoolVar(&o.once, "once", false, "print the current state and exit")
	if err := parseFlags(fs, "watch", args, stdout); err != nil {
		return o, err
	}
	if fs.NArg() != 1 {
		return o, usageError("watch", "watch needs one NAME, got %d arguments", fs.NArg())
	}
	o.name = fs.Arg(0)
	return o, checkName("watch", o.name)
}

// runWatch is `sidelock watch NAME`: one JSON line per change until ctx
// ends (SIGINT, SIGTERM: exit 0), or with --once the first, the state.
func runWatch(ctx context.Context, args []string, getenv func(string) string, stdout, _ io.Writer) error {
	o, err := parseWatch(args, getenv, stdout)
	if err != nil {
		return err
	}
	// The watch ends with this function, not only with ctx: --once
	// returns after the first line.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := o.sidecar.client(getenv).Watch(ctx, o.name)
	if err != nil {
		return watchRefused(ctx, o, err)
	}
	out := json.NewEncoder(stdout)
	for ch := range w.Changes() {
		if err := out.Encode(lineOf(ch)); err != nil {
			return exitWith(exitUnavailable, "printing the change: %v", err)
		}
		if o.once {
			return onceResult(o, ch)
		}
	}
	return watchEnded(ctx, o, w.Err())
}

// watchRefused maps a watch that could not start: interrupted first is
// an ordinary end (0), a mistake the sidecar found is 64, else 69.
func watchRefused(ctx context.Context, o watchOptions, err error) error {
	var apiErr *client.Error
	switch {
	case ctx.Err() != nil && !o.once:
		return nil
	case errors.As(err, &apiErr) && apiErr.Status == 400:
		return usageError("watch", "the sidecar refused the request: %s (%s)", apiErr.Detail, apiErr.Code)
	default:
		return exitWith(exitUnavailable, "sidecar at %s: %w", o.sidecar.api, err)
	}
}

// watchEnded is how a watch that printed lines ends: by a signal (0), or
// because the sidecar refused to go on (69).
func watchEnded(ctx context.Context, o watchOptions, err error) error {
	if ctx.Err() != nil && !o.once {
		return nil
	}
	return exitWith(exitUnavailable, "watching %q at %s ended: %w", o.name, o.sidecar.api, err)
}

// onceResult is --once's exit: 0 for a state, 69 when the sidecar could
// not read the masters.
func onceResult(o watchOptions, ch client.Change) error {
	if ch.Kind == "unavailable" {
		return exitWith(exitUnavailable, "sidecar at %s cannot read lock %q: %s", o.sidecar.api, o.name, ch.Detail)
	}
	return nil
}

// watchLine is one printed change: the sidecar's event data under its
// event name. held is left out of "unavailable", where it is unknown.
type watchLine struct {
	Event      string    `json:"event"`
	Name       string    `json:"name"`
	Held       *bool     `json:"held,omitempty"`
	Owner      string    `json:"owner,omitempty"`
	Fence      int64     `json:"fence,omitempty"`
	ValidUntil time.Time `json:"valid_until,omitzero"`
	Since      time.Time `json:"since,omitzero"`
	Reason     string    `json:"reason,omitempty"`
	Detail     string    `json:"detail,omitempty"`
}

func lineOf(ch client.Change) watchLine {
	l := watchLine{Event: ch.Kind, Name: ch.Name, Owner: ch.Owner, Fence: ch.Fence,
		ValidUntil: ch.ValidUntil, Since: ch.Since, Reason: ch.Reason, Detail: ch.Detail}
	if ch.Kind != "unavailable" {
		l.Held = &ch.Held
	}
	return l
}
