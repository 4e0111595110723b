package redlock

import "sync"

// WatchReleases calls notify each time key is released on any master that
// implements ReleaseWatcher (masters that do not are skipped), until cancel
// is called; cancel is idempotent. It lets a waiter retry Acquire as soon as
// the holder lets go instead of at its next poll.
//
// Each master announces on its own, so one Locker.Release fires notify up to
// once per master, N times in all (so does the clean-up after a failed
// Acquire, which is a release too). Callers should coalesce, typically with
// a non-blocking send on a channel with a buffer of one:
//
//	wake := make(chan struct{}, 1)
//	cancel := l.WatchReleases(key, func() {
//		select {
//		case wake <- struct{}{}:
//		default:
//		}
//	})
//	defer cancel()
//
// notify is called from any goroutine and must not block. Announcements
// are best-effort (see ReleaseWatcher): wait on wake and on a timer, never
// on wake alone.
func (l *Locker) WatchReleases(key string, notify func()) (cancel func()) {
	var cancels []func()
	for _, n := range l.nodes {
		if w, ok := n.(ReleaseWatcher); ok {
			cancels = append(cancels, w.WatchReleases(key, notify))
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, c := range cancels {
				c()
			}
		})
	}
}
