package nodetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// Member lists as package membership writes them: canonical addresses.
const (
	listA = "m1:6379,m2:6379,m3:6379"
	listB = "m1:6379,m2:6379,m4:6379"
)

// memberRecorder returns the node as a MemberRecorder, or skips the test.
func (s *suite) memberRecorder(t *testing.T) redlock.MemberRecorder {
	t.Helper()
	m, ok := s.node.(redlock.MemberRecorder)
	if !ok {
		t.Skip("the node does not implement redlock.MemberRecorder")
	}
	return m
}

func (s *suite) membersKey() string { return s.key + "#members" }

// record records list and returns the live lists, sorted.
func (s *suite) record(t *testing.T, m redlock.MemberRecorder, key, list string, ttl time.Duration) []string {
	t.Helper()
	live, err := m.RecordMembers(s.ctx, key, list, ttl)
	if err != nil {
		t.Fatalf("RecordMembers(%q, %q, %v): %v", key, list, ttl, err)
	}
	return slices.Sorted(slices.Values(live))
}

func wantLists(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("live lists = %q, want %q", got, want)
	}
}

// A record is returned to its own writer, once however often it is
// refreshed, and keys are independent.
func testMembersRecorded(t *testing.T, s *suite) {
	m := s.memberRecorder(t)
	wantLists(t, s.record(t, m, s.membersKey(), listA, longTTL), listA)
	wantLists(t, s.record(t, m, s.membersKey(), listA, longTTL), listA)
	wantLists(t, s.record(t, m, s.membersKey()+"/other", listB, longTTL), listB)
	// Lists are opaque strings.
	odd := "unicode 🔒,nul\x00,invalid \xff"
	wantLists(t, s.record(t, m, s.membersKey()+"/odd", odd, longTTL), odd)
}

// Two lists recorded at one key are both live.
func testMembersTwoListsLive(t *testing.T, s *suite) {
	m := s.memberRecorder(t)
	wantLists(t, s.record(t, m, s.membersKey(), listA, longTTL), listA)
	wantLists(t, s.record(t, m, s.membersKey(), listB, longTTL), listA, listB)
	wantLists(t, s.record(t, m, s.membersKey(), listA, longTTL), listA, listB)
}

// A record expires ttl after its last refresh, not before and not much
// later, while the other records at the key stay.
func testMembersExpire(t *testing.T, s *suite) {
	m := s.memberRecorder(t)
	start := time.Now()
	s.record(t, m, s.membersKey(), listA, shortTTL)
	deadline := start.Add(expiryDeadline)
	for {
		live := s.record(t, m, s.membersKey(), listB, longTTL)
		now := time.Now()
		if !slices.Contains(live, listA) {
			if lived := now.Sub(start); lived < shortTTL-clockSlack {
				t.Errorf("record expired after %v, before its ttl %v", lived, shortTTL)
			}
			wantLists(t, live, listB)
			return
		}
		if now.After(deadline) {
			t.Fatalf("record still live %v after its ttl %v: %q", expiryDeadline, shortTTL, live)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Refreshing a record restarts its ttl; a shorter ttl does not cut short
// the expiry an earlier call gave it, since another writer of the same
// list may rely on it.
func testMembersRefresh(t *testing.T, s *suite) {
	m := s.memberRecorder(t)
	s.record(t, m, s.membersKey(), listA, shortTTL)
	s.record(t, m, s.membersKey(), listA, longTTL)
	s.record(t, m, s.membersKey(), listA, shortTTL)
	time.Sleep(3 * shortTTL)
	wantLists(t, s.record(t, m, s.membersKey(), listB, longTTL), listA, listB)
}

// After its last record expires the key is gone: Get finds nothing there
// (and no longer fails on a Redis value of another type).
func testMembersKeyVanishes(t *testing.T, s *suite) {
	m := s.memberRecorder(t)
	s.record(t, m, s.membersKey(), listA, shortTTL)
	s.record(t, m, s.membersKey(), listB, shortTTL)
	deadline := time.Now().Add(expiryDeadline)
	for {
		value, ttl, err := s.node.Get(s.ctx, s.membersKey())
		if err == nil && value == "" && ttl == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the records' key is still there %v after they expired: %q %v %v", expiryDeadline, value, ttl, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A new record starts from nothing.
	wantLists(t, s.record(t, m, s.membersKey(), listB, longTTL), listB)
}

// A finished context fails the call promptly with its error and records
// nothing.
func testMembersFinishedContext(t *testing.T, s *suite) {
	m := s.memberRecorder(t)
	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	start := time.Now()
	_, err := m.RecordMembers(ctx, s.membersKey(), listA, longTTL)
	if took := time.Since(start); took > promptly {
		t.Errorf("RecordMembers with a cancelled context took %v, want under %v", took, promptly)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RecordMembers with a cancelled context: err = %v, want errors.Is(err, context.Canceled)", err)
	}
	wantLists(t, s.record(t, m, s.membersKey(), listB, longTTL), listB)
}
