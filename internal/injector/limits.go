package injector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"
)

// Limits on what one call may make the injector read, hold, answer and
// log. The injector has no client authentication (whatever reaches its
// Service may call it) and runs under the chart's 64Mi memory limit, so
// every size a caller controls is bounded here, in one place.
const (
	// MaxReviewBytes bounds a request body; a larger one gets 413. The
	// API server refuses request bodies over 3 MiB (MaxRequestBodyBytes of
	// k8s.io/apiserver), so a pod under review is at most that as its
	// author sent it; the review around it (uid, kinds, userInfo) and the
	// re-encoding take a few KiB, well within the 256 KiB added.
	MaxReviewBytes = 3<<20 + 256<<10

	// reviewBudgetBytes bounds the bytes of the reviews being read and
	// decoded at once (the sum of their Content-Length): two maximal
	// reviews, or any number of ordinary ones (a pod is a few KiB). Each
	// takes a few times its size in memory while decoded, so this, and not
	// the number of callers, is what bounds the injector's memory.
	reviewBudgetBytes = 2 * MaxReviewBytes
	// reviewBudgetWait is how long a review waits for room in the budget
	// before 429 with Retry-After: the API server's client retries those
	// within the webhook's timeout (5s in the chart), and a maximal review
	// is decoded in tens of milliseconds, so only a flood waits this long.
	reviewBudgetWait = time.Second
	// retryAfterSeconds is the Retry-After of that 429.
	retryAfterSeconds = 1

	// maxUIDBytes bounds the request's uid, echoed in the answer and in
	// every log line (the API server's are 36-byte UUIDs).
	maxUIDBytes = 128

	// maxSidelockAnnotations bounds the sidelock.io/ annotations of a pod:
	// there are a dozen settings; more is an error, reported with a count
	// instead of one line each.
	maxSidelockAnnotations = 32
	// maxAnnotationValueBytes bounds the value of a sidelock.io/
	// annotation; the longest valid one (a key prefix) is 64 bytes.
	maxAnnotationValueBytes = 256

	// maxReportedProblems bounds the problems a denial lists; the rest
	// are counted.
	maxReportedProblems = 5
	// maxQuotedBytes bounds a caller's string (key, value, name) quoted
	// in a message or a log line; longer ones are cut with an ellipsis.
	maxQuotedBytes = 80
	// maxMessageBytes bounds a denial or error message, and a log value:
	// the limits above keep them shorter; this is the backstop.
	maxMessageBytes = 2048
)

// clip cuts s to at most limit bytes, on a rune boundary, marking the cut
// with an ellipsis and the original length.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	suffix := fmt.Sprintf("…(%d bytes)", len(s))
	cut := limit - len(suffix)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:max(cut, 0)] + suffix
}

// quote is %q of a caller's string, clipped first.
func quote(s string) string { return fmt.Sprintf("%q", clip(s, maxQuotedBytes)) }

// reviewBudget is a semaphore counted in bytes: a review holds its size
// while it is read and decoded. Waiters are served in no particular order;
// a review larger than the budget never fits (MaxReviewBytes keeps them
// out).
type reviewBudget struct {
	mu    sync.Mutex
	free  int64
	freed chan struct{} // closed and replaced whenever bytes are released
}

func newReviewBudget(size int64) *reviewBudget {
	return &reviewBudget{free: size, freed: make(chan struct{})}
}

// acquire takes n bytes, waiting until they are free, ctx ends or wait
// passes; it tells whether it got them.
func (b *reviewBudget) acquire(ctx context.Context, n int64, wait time.Duration) bool {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if n <= b.free {
			b.free -= n
			b.mu.Unlock()
			return true
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// release returns n bytes and wakes the waiters.
func (b *reviewBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.free += n
	close(b.freed)
	b.freed = make(chan struct{})
}

// boundedHandler clips every string a log line carries to maxMessageBytes:
// log lines quote callers (pod names, keys, errors), and one line must not
// cost megabytes however a review is made.
type boundedHandler struct{ slog.Handler }

func (h boundedHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, clip(r.Message, maxMessageBytes), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(boundAttr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h boundedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	bounded := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		bounded[i] = boundAttr(a)
	}
	return boundedHandler{h.Handler.WithAttrs(bounded)}
}

func (h boundedHandler) WithGroup(name string) slog.Handler {
	return boundedHandler{h.Handler.WithGroup(name)}
}

// boundAttr clips a string, an error or a Stringer to maxMessageBytes, and
// the members of a group.
func boundAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, clip(v.String(), maxMessageBytes))
	case slog.KindGroup:
		members := v.Group()
		bounded := make([]any, len(members))
		for i, m := range members {
			bounded[i] = boundAttr(m)
		}
		return slog.Group(a.Key, bounded...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, clip(x.Error(), maxMessageBytes))
		case fmt.Stringer:
			return slog.String(a.Key, clip(x.String(), maxMessageBytes))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// problemList collects the problems of a pod for one denial: the first
// maxReportedProblems of them, and a count of the others.
type problemList struct {
	shown []error
	more  int
}

func (l *problemList) add(err error) {
	if len(l.shown) < maxReportedProblems {
		l.shown = append(l.shown, err)
		return
	}
	l.more++
}

// err is the problems joined, or nil.
func (l *problemList) err() error {
	errs := l.shown
	if l.more > 0 {
		errs = append(errs, invalidf("and %d more problems", l.more))
	}
	return errors.Join(errs...)
}
