package lease

import (
	"crypto/subtle"
	"fmt"
	"time"
)

// Idempotency-Key bounds. The key finds a live lease and hands back its
// token, so it is a capability as strong as the token to any process of the
// pod that can guess it: it must be long enough not to be guessed (a
// random UUID is 36 bytes) and is never logged.
const (
	MinIdempotencyKeyLen = 16
	MaxIdempotencyKeyLen = 128
)

// ErrIdempotencyMismatch is an acquire that reused the Idempotency-Key of a live
// lease with different parameters. It is refused rather than answered with
// the lease: a replay returns the original answer only for the original
// request (as payment APIs do), so a reused key never changes a lease.
var ErrIdempotencyMismatch = fmt.Errorf("%w: the Idempotency-Key was used for a lease with other parameters (ttl, owner, max_hold or hold)", ErrInvalid)

// replayKey is what a retried acquire must repeat to be handed its lease
// again: the key and every parameter that shapes the lease (wait does not,
// it only says how long to queue).
type replayKey struct {
	key     string
	ttl     time.Duration
	owner   string
	maxHold time.Duration
	permits int
	mode    Mode
}

func replayKeyOf(req Request) replayKey {
	return replayKey{key: req.IdempotencyKey, ttl: req.TTL, owner: req.Owner, maxHold: req.MaxHold, permits: req.Permits, mode: req.Mode}
}

// validateIdempotencyKey checks the key's size and alphabet (visible ASCII,
// as an HTTP header carries it), and refuses it on a held lease: that lease
// lives and dies with its connection, so a retry after a lost connection is
// a new acquire, and a replay must never attach a second connection that
// could end the first caller's lease.
func validateIdempotencyKey(req Request) error {
	k := req.IdempotencyKey
	if k == "" {
		return nil
	}
	if req.Hold {
		return fmt.Errorf("%w: Idempotency-Key applies to heartbeat leases; a hold lease ends with its connection, so a retry is a new acquire", ErrInvalid)
	}
	if len(k) < MinIdempotencyKeyLen || len(k) > MaxIdempotencyKeyLen {
		return fmt.Errorf("%w: Idempotency-Key must be %d to %d bytes (it has %d) and unguessable by other processes of the pod, such as a random UUID",
			ErrInvalid, MinIdempotencyKeyLen, MaxIdempotencyKeyLen, len(k))
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] >= 0x7f {
			return fmt.Errorf("%w: Idempotency-Key may contain only visible ASCII (byte %d is not)", ErrInvalid, i)
		}
	}
	return nil
}

// replay finds the live lease a retried acquire with the same idempotency
// key obtained. The same key with other parameters is refused with
// ErrIdempotencyMismatch; a lease of that name under another key (or none)
// is no replay.
func (m *Manager) replay(req Request) (Info, bool, error) {
	if req.IdempotencyKey == "" {
		return Info{}, false, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range req.target().resources() {
		l, ok := m.leases[id]
		if !ok || l.replay.key == "" || subtle.ConstantTimeCompare([]byte(l.replay.key), []byte(req.IdempotencyKey)) != 1 {
			continue
		}
		if l.hold || l.replay != replayKeyOf(req) {
			return Info{}, false, ErrIdempotencyMismatch
		}
		return l.infoLocked(true), true, nil
	}
	return Info{}, false, nil
}
