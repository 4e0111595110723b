package memnode

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Member-list records live in the same map as lock keys, one entry per
// key holding every record of that key encoded in its value and expiring
// with the last of them, as the Redis node's sorted set does. So expiry,
// sweeping, Restart and Close treat them exactly like keys. One
// difference: Get on such a key returns the encoding where Redis fails
// with WRONGTYPE (membership.Key keeps record keys apart from lock keys).

// membersMagic starts an encoded record set; no lock value a test or the
// sidecar writes starts with it.
const membersMagic = "\x00sidelock-members\x00"

// errWrongType is the Redis node's WRONGTYPE: key holds a lock value.
var errWrongType = errors.New("key holds a lock value, not member records")

// RecordMembers implements redlock.MemberRecorder on the node's clock. A
// record's expiry is rounded up to whole milliseconds like a key's, and
// never moves earlier. The live lists come back sorted.
func (n *Node) RecordMembers(ctx context.Context, key, members string, ttl time.Duration) ([]string, error) {
	if err := n.enter(ctx, "members"); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	records := map[string]time.Time{}
	if e, ok := n.lookup(key, now); ok {
		var decoded bool
		if records, decoded = decodeRecords(e.value); !decoded {
			return nil, n.wrap("members", errWrongType)
		}
	}
	maps.DeleteFunc(records, func(_ string, expiresAt time.Time) bool { return !now.Before(expiresAt) })
	ms := max((ttl+time.Millisecond-1)/time.Millisecond, 1)
	if expiresAt := now.Add(ms * time.Millisecond); expiresAt.After(records[members]) {
		records[members] = expiresAt
	}

	last := now
	for _, expiresAt := range records {
		if expiresAt.After(last) {
			last = expiresAt
		}
	}
	n.entries[key] = entry{value: encodeRecords(records), expiresAt: last}
	n.writesSinceSweep++
	n.maybeSweep(now)
	return slices.Sorted(maps.Keys(records)), nil
}

// encodeRecords writes each record as "<expiry in unix ns> <length>:<list>",
// sorted by list so the encoding is deterministic.
func encodeRecords(records map[string]time.Time) string {
	var b strings.Builder
	b.WriteString(membersMagic)
	for _, list := range slices.Sorted(maps.Keys(records)) {
		b.WriteString(strconv.FormatInt(records[list].UnixNano(), 10))
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(len(list)))
		b.WriteByte(':')
		b.WriteString(list)
	}
	return b.String()
}

// decodeRecords reads encodeRecords' output; ok is false for anything else.
func decodeRecords(s string) (records map[string]time.Time, ok bool) {
	s, ok = strings.CutPrefix(s, membersMagic)
	if !ok {
		return nil, false
	}
	records = map[string]time.Time{}
	for s != "" {
		expiry, rest, ok1 := strings.Cut(s, " ")
		length, rest, ok2 := strings.Cut(rest, ":")
		ns, err1 := strconv.ParseInt(expiry, 10, 64)
		l, err2 := strconv.Atoi(length)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || l < 0 || l > len(rest) {
			return nil, false
		}
		records[rest[:l]] = time.Unix(0, ns)
		s = rest[l:]
	}
	return records, true
}
