package client

import (
	"context"
	"errors"
	"time"
)

// Leader election is a lock whose owner names the leader: the campaign
// holds it (hold=true) for as long as the leader's connection is open,
// its fence is the term number (strictly increasing across terms), and
// anyone can see who leads with Leader or Watch.

// campaignWait is how long each attempt of a campaign waits when the
// caller names no wait: the sidecar's default SIDELOCK_MAX_WAIT. A
// sidecar configured lower refuses it (400 invalid_wait); the campaign
// then halves it until the sidecar takes it.
const campaignWait = 5 * time.Minute

// noRetryAfter is the pause between two attempts that did not wait (a
// sidecar whose max wait is 0) when the sidecar suggests none.
const noRetryAfter = time.Second

// Campaign holds name as Hold does, waiting as long as it takes: each
// attempt waits opts.Wait (zero: as long as the sidecar allows) and a 409
// lock_held starts the next, until the lock is granted or ctx ends. While
// the returned Held's stream is open this caller leads; its end (Done;
// End says "released" or "lost") ends the term, and Release resigns.
// opts.Owner is what Leader and Watch show as the leader: make it unique
// to this candidate. Once ctx ends it returns ctx's error.
func (c *Client) Campaign(ctx context.Context, name string, opts Options) (*Held, error) {
	chosenWait := opts.Wait == 0
	if chosenWait {
		opts.Wait = campaignWait
	}
	for {
		held, err := c.Hold(ctx, name, opts)
		switch {
		case err == nil:
			return held, nil
		case ctx.Err() != nil: // whatever the last attempt said, the campaign ended with ctx
			return nil, ctx.Err()
		case chosenWait && opts.Wait > 0 && hasCode(err, "invalid_wait"):
			opts.Wait = (opts.Wait / 2).Truncate(time.Second)
		case errors.Is(err, ErrLockHeld):
			if opts.Wait == 0 && !pause(ctx, retryAfter(err)) {
				return nil, ctx.Err()
			}
		default:
			return nil, err
		}
	}
}

// Leader asks the masters, once, who leads name now: Held false when no
// one does, else the leader's Owner and its term (Fence).
func (c *Client) Leader(ctx context.Context, name string) (Status, error) {
	return c.Inspect(ctx, name)
}

func hasCode(err error, code string) bool {
	var apiErr *Error
	return errors.As(err, &apiErr) && apiErr.Code == code
}

// retryAfter is the pause the sidecar suggested with err, or noRetryAfter.
func retryAfter(err error) time.Duration {
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.RetryAfter > 0 {
		return apiErr.RetryAfter
	}
	return noRetryAfter
}

// pause sleeps d; false if ctx ended first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
