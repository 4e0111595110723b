package nodetest

import (
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// The cases of redlock.TenureNode: blocks of fences, holder records,
// waiter marks and "wanted" messages, for both node kinds alike.

func (s *suite) tenure(t *testing.T) redlock.TenureNode {
	t.Helper()
	n, ok := s.node.(redlock.TenureNode)
	if !ok {
		t.Skip("the node does not implement redlock.TenureNode")
	}
	return n
}

func (s *suite) tkeys() redlock.TenureKeys { return redlock.TenureKeysOf(s.key) }

// takeArgs asks for the key for value with a block proposal whose top is
// an hour ahead (above any floor), as sidecar sc arriving at arrival.
func takeArgs(value string, sc string, arrival int64, block int64) redlock.TakeArgs {
	return redlock.TakeArgs{
		Value: value, TTL: longTTL, Fencing: redlock.FenceProposed, Block: block, Retention: longTTL,
		Proposal: time.Now().UnixMicro() + ahead + block - 1,
		Holder:   redlock.HolderRecord{Grant: "g-" + value, Owner: "o-" + value, Channel: "ch-" + sc},
		Mark:     redlock.WaiterMark{Sidecar: sc, Arrival: arrival},
	}
}

func (s *suite) take(t *testing.T, n redlock.TenureNode, a redlock.TakeArgs) redlock.TakeAnswer {
	t.Helper()
	got, err := n.TakeTenure(s.ctx, s.tkeys(), a)
	if err != nil {
		t.Fatalf("TakeTenure(%q): %v", a.Value, err)
	}
	return got
}

func (s *suite) holder(t *testing.T, n redlock.TenureNode) redlock.HolderRead {
	t.Helper()
	r, err := n.GetHolder(s.ctx, s.tkeys())
	if err != nil {
		t.Fatalf("GetHolder: %v", err)
	}
	return r
}

// A take of a free key commits the TOP of its block to the counter and
// records the holder with the block's FIRST fence, in one step; a
// proposal whose first fence is not above the floor commits nothing (and
// writes no record), and the answer is the floor.
func testTenureTakeReservesABlock(t *testing.T, s *suite) {
	n := s.tenure(t)
	a := takeArgs("A", "s1", 1, 16)
	got := s.take(t, n, a)
	first := a.Proposal - 15
	if !got.Acquired || !got.Committed || got.Fence != a.Proposal || got.Prev != 0 {
		t.Fatalf("take of a free key: %+v, want the top %d committed", got, a.Proposal)
	}
	r := s.holder(t, n)
	if r.Value != "A" || r.Counter != a.Proposal || r.Record.Value != "A" || r.Record.Fence != first ||
		r.Record.Grant != "g-A" || r.Record.Owner != "o-A" || r.Record.Channel != "ch-s1" || r.Record.Idle {
		t.Fatalf("after the take: %+v, want counter %d and a record of A with fence %d", r, a.Proposal, first)
	}
	if _, err := s.node.Release(s.ctx, s.key, "A"); err != nil {
		t.Fatal(err)
	}
	low := takeArgs("B", "s1", 2, 16)
	low.Proposal = a.Proposal + 15 // its first fence is the old top: not above the floor
	if got := s.take(t, n, low); !got.Acquired || got.Committed || got.Fence != a.Proposal {
		t.Fatalf("a block not above the floor: %+v, want taken, uncommitted, the floor %d", got, a.Proposal)
	}
	if r := s.holder(t, n); r.Counter != a.Proposal || r.Record.Value == "B" {
		t.Fatalf("after an uncommitted take: %+v, want the counter untouched and no record of B", r)
	}
}

// With one master the block is committed at once, above the floor and
// above the fence asked for.
func testTenureTakeAtOnce(t *testing.T, s *suite) {
	n := s.tenure(t)
	a := takeArgs("A", "s1", 1, 8)
	a.Fencing, a.Proposal = redlock.FenceAtOnce, time.Now().UnixMicro()+ahead
	got := s.take(t, n, a)
	if !got.Acquired || !got.Committed || got.Fence != a.Proposal+8 {
		t.Fatalf("take at once: %+v, want the top %d", got, a.Proposal+8)
	}
	if r := s.holder(t, n); r.Counter != a.Proposal+8 || r.Record.Fence != a.Proposal+1 {
		t.Fatalf("after it: %+v, want counter %d and the holder's fence %d", r, a.Proposal+8, a.Proposal+1)
	}
}

// A commit round raises the counter to the top and records the holder
// in one step, only while the key is the holder's.
func testTenureCommit(t *testing.T, s *suite) {
	n := s.tenure(t)
	s.mustAcquire(t, s.key, "A", longTTL)
	top := time.Now().UnixMicro() + ahead
	rec := redlock.HolderRecord{Fence: top - 3, Grant: "g", Owner: "o", Channel: "c"}
	if ok, err := n.CommitTenure(s.ctx, s.tkeys(), "B", top, rec, longTTL); err != nil || ok {
		t.Fatalf("commit by a non-holder: %v %v", ok, err)
	}
	if ok, err := n.CommitTenure(s.ctx, s.tkeys(), "A", top, rec, longTTL); err != nil || !ok {
		t.Fatalf("commit by the holder: %v %v", ok, err)
	}
	if ok, err := n.CommitTenure(s.ctx, s.tkeys(), "A", top-10, rec, longTTL); err != nil || !ok {
		t.Fatalf("a lower commit by the holder: %v %v", ok, err)
	}
	if r := s.holder(t, n); r.Counter != top || r.Record.Value != "A" || r.Record.Fence != top-3 || r.Record.Owner != "o" {
		t.Fatalf("after the commits: %+v, want counter %d (the larger) and A's record with fence %d", r, top, top-3)
	}
}

// messages collects the payloads published on a channel.
type messages struct {
	mu  sync.Mutex
	got []string
}

func (m *messages) add(p string) {
	m.mu.Lock()
	m.got = append(m.got, p)
	m.mu.Unlock()
}

func (m *messages) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(notifyDeadline)
	for {
		m.mu.Lock()
		got := append([]string(nil), m.got...)
		m.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// watchMessages subscribes to channel and waits until the subscription is
// live (a message published through it arrives), by publishing with
// probe until one does; the probes' messages are then forgotten.
func (s *suite) watchMessages(t *testing.T, n redlock.TenureNode, channel string, probe func()) *messages {
	t.Helper()
	m := &messages{}
	cancel := n.WatchMessages(channel, m.add)
	t.Cleanup(cancel)
	deadline := time.Now().Add(notifyDeadline)
	for len(m.wait(t, 0)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no message on %q within %v", channel, notifyDeadline)
		}
		probe()
		time.Sleep(primeAttempt / 10)
	}
	m.mu.Lock()
	m.got = nil
	m.mu.Unlock()
	return m
}

// A take of a held key is refused with the holder's ttl; a refusal that
// asks for a mark leaves (or refreshes) it and publishes "wanted" on the
// holder record's channel: the mark's arrival, its ttl and the key.
func testTenureRefusalLeavesAMark(t *testing.T, s *suite) {
	n := s.tenure(t)
	s.take(t, n, takeArgs("A", "s1", 1, 4))
	b := takeArgs("B", "s2", 7, 4)
	b.Mark.TTL = longTTL
	msgs := s.watchMessages(t, n, "ch-s1", func() { s.take(t, n, b) })
	b.Mark.Arrival = 9
	got := s.take(t, n, b)
	if got.Acquired || got.Committed || got.HolderTTL <= 0 || got.Idle || got.ByMark {
		t.Fatalf("take of a held key: %+v, want refused with the holder's ttl", got)
	}
	m := msgs.wait(t, 1)
	if len(m) == 0 {
		t.Fatal("no wanted message")
	}
	w, ok := redlock.ParseMessage(m[len(m)-1])
	if !ok || w.Kind != redlock.MessageWanted || w.Key != s.key || w.Mark.Arrival != 9 || w.Mark.TTL != longTTL || w.ReplyTo != "ch-s2" {
		t.Fatalf("wanted message %q: %+v %v, want arrival 9 from ch-s2", m[len(m)-1], w, ok)
	}
	// The holder's next take (a retry) sees B's mark as the oldest.
	if got := s.take(t, n, takeArgs("A", "s1", 1, 4)); !got.Acquired || got.Oldest.Sidecar != "s2" || got.Oldest.Arrival != 9 || got.Oldest.TTL <= 0 {
		t.Fatalf("the holder's retried take: %+v, want it to report s2's mark", got)
	}
}

// A free key goes to the oldest live mark of another sidecar, or to a
// caller older than every live mark; a caller's own sidecar's mark never
// stands in its way; expired marks count for nothing.
func testTenureMarkRule(t *testing.T, s *suite) {
	n := s.tenure(t)
	b := takeArgs("B", "s2", 100, 4)
	b.Mark.TTL = longTTL
	s.take(t, n, takeArgs("A", "s1", 1, 4))
	s.take(t, n, b) // refused: leaves s2's mark at 100
	if _, err := s.node.Release(s.ctx, s.key, "A"); err != nil {
		t.Fatal(err)
	}
	c := takeArgs("C", "s3", 200, 4)
	c.Mark.TTL = longTTL
	if got := s.take(t, n, c); got.Acquired || !got.ByMark || got.Oldest.Sidecar != "s2" || got.HolderTTL <= 0 {
		t.Fatalf("a younger caller of a free key: %+v, want refused by s2's mark", got)
	}
	if got := s.take(t, n, takeArgs("D", "s4", 50, 4)); !got.Acquired {
		t.Fatalf("a caller older than every mark: %+v, want taken", got)
	}
	if _, err := s.node.Release(s.ctx, s.key, "D"); err != nil {
		t.Fatal(err)
	}
	own := takeArgs("B2", "s2", 300, 4) // s2's own mark does not refuse it, s3's (200) does
	if got := s.take(t, n, own); got.Acquired || !got.ByMark || got.Oldest.Sidecar != "s3" {
		t.Fatalf("s2's caller behind s3's mark: %+v, want refused by s3", got)
	}
	if got := s.take(t, n, b); !got.Acquired || got.Oldest.Sidecar != "s3" {
		t.Fatalf("the oldest mark's caller: %+v, want taken (s3's mark still reported)", got)
	}
	if _, err := s.node.Release(s.ctx, s.key, "B"); err != nil {
		t.Fatal(err)
	}
	// Y (150) is younger than s2's mark (100) but older than s3's (200):
	// it may take the key only if s2's grant took s2's mark away.
	if got := s.take(t, n, takeArgs("Y", "s9", 150, 4)); !got.Acquired {
		t.Fatalf("after s2's grant: %+v, want s2's mark gone with the grant", got)
	}
	if _, err := s.node.Release(s.ctx, s.key, "Y"); err != nil {
		t.Fatal(err)
	}
	s.take(t, n, b) // s2 holds it again
	if _, err := s.node.Release(s.ctx, s.key, "B"); err != nil {
		t.Fatal(err)
	}
	if err := n.RemoveMark(s.ctx, s.tkeys(), "s3"); err != nil {
		t.Fatal(err)
	}
	if err := n.RemoveMark(s.ctx, s.tkeys(), "s2"); err != nil {
		t.Fatal(err)
	}
	short := takeArgs("E", "s5", 10, 4)
	short.Mark.TTL = shortTTL
	s.take(t, n, takeArgs("F", "s6", 1, 4))
	s.take(t, n, short) // refused: s5's mark lives shortTTL
	if _, err := s.node.Release(s.ctx, s.key, "F"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(expiryDeadline)
	for {
		got := s.take(t, n, takeArgs("G", "s7", 500, 4))
		if got.Acquired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a mark still refuses %v after its %v ttl: %+v", expiryDeadline, shortTTL, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A hand-over (From) treats the giver's key as free, under the mark rule:
// an older mark refuses it and leaves the giver's key in place.
func testTenureHandOver(t *testing.T, s *suite) {
	n := s.tenure(t)
	given := s.take(t, n, takeArgs("A", "s1", 1, 4))
	to := takeArgs("B", "s1", 5, 4)
	to.From, to.Proposal = "A", given.Fence+ahead
	if got := s.take(t, n, to); !got.Acquired || !got.Committed || got.Prev != given.Fence {
		t.Fatalf("hand-over from the holder: %+v, want taken over the giver's top %d", got, given.Fence)
	}
	if r := s.holder(t, n); r.Value != "B" || r.Record.Value != "B" || r.Record.Fence != to.Proposal-3 {
		t.Fatalf("after the hand-over: %+v, want B's key and record", r)
	}
	w := takeArgs("W", "s2", 3, 4)
	w.Mark.TTL = longTTL
	s.take(t, n, w) // refused, held: leaves s2's mark at 3
	late := takeArgs("C", "s1", 9, 4)
	late.From, late.Proposal = "B", to.Proposal+ahead
	if got := s.take(t, n, late); got.Acquired || !got.ByMark {
		t.Fatalf("a hand-over to a caller behind an older mark: %+v, want refused", got)
	}
	if v, _ := s.get(t, s.key); v != "B" {
		t.Fatalf("after a refused hand-over the key holds %q, want the giver's B", v)
	}
}

// An idle holder (a note with Idle) is revocable: a refused take says so,
// with how long it lingers, and asks it to let go even without a mark.
func testTenureIdleHolder(t *testing.T, s *suite) {
	n := s.tenure(t)
	got := s.take(t, n, takeArgs("A", "s1", 1, 4))
	rec := redlock.HolderRecord{Value: "A", Fence: got.Fence - 3, Grant: "g2", Owner: "o2", Channel: "ch-s1", Idle: true, IdleTTL: longTTL, Seq: 1}
	if ans, err := n.NoteHolder(s.ctx, s.tkeys(), rec, "s1", longTTL); err != nil || !ans.Written {
		t.Fatalf("idle note: %+v %v", ans, err)
	}
	b := takeArgs("B", "s2", 7, 4)
	msgs := s.watchMessages(t, n, "ch-s1", func() { s.take(t, n, b) })
	refused := s.take(t, n, b)
	if refused.Acquired || !refused.Idle || refused.IdleTTL <= 0 || refused.IdleTTL > longTTL {
		t.Fatalf("take from an idle holder: %+v, want refused as idle", refused)
	}
	if m := msgs.wait(t, 1); len(m) == 0 {
		t.Fatal("no wanted message to the idle holder")
	}
	if r := s.holder(t, n); !r.Record.Idle || r.Record.IdleTTL <= 0 || r.Record.Owner != "o2" {
		t.Fatalf("GetHolder of an idle holder: %+v", r)
	}
}

// A note is written only while the key holds its value, never over a
// later note of the value, and is announced on the holder's channel; it
// reports the marks.
func testTenureNote(t *testing.T, s *suite) {
	n := s.tenure(t)
	got := s.take(t, n, takeArgs("A", "s1", 1, 4))
	note := func(seq int64, fence int64, value string) bool {
		t.Helper()
		ans, err := n.NoteHolder(s.ctx, s.tkeys(), redlock.HolderRecord{Value: value, Fence: fence, Grant: "g", Owner: "o", Channel: "c", Seq: seq}, "s1", longTTL)
		if err != nil {
			t.Fatal(err)
		}
		return ans.Written
	}
	first := got.Fence - 3
	probes := int64(0)
	msgs := s.watchMessages(t, n, redlock.HolderChannel(s.key), func() { probes++; note(probes, first, "A") })
	if !note(probes+2, first+2, "A") {
		t.Fatal("a note of the holder was not written")
	}
	if m := msgs.wait(t, 1); len(m) == 0 {
		t.Fatal("a note was not announced")
	}
	if note(probes+1, first+1, "A") {
		t.Fatal("a note older than the record was written")
	}
	if note(probes+9, first+3, "Z") {
		t.Fatal("a note of another value was written")
	}
	if r := s.holder(t, n); r.Record.Fence != first+2 || r.Record.Seq != probes+2 {
		t.Fatalf("record after the notes: %+v, want fence %d seq %d", r.Record, first+2, probes+2)
	}
	b := takeArgs("B", "s2", 7, 4)
	b.Mark.TTL = longTTL
	s.take(t, n, b)
	ans, err := n.NoteHolder(s.ctx, s.tkeys(), redlock.HolderRecord{Value: "A", Fence: first + 3, Seq: probes + 3}, "s1", longTTL)
	if err != nil || !ans.Written || ans.Oldest.Sidecar != "s2" || ans.Oldest.Arrival != 7 {
		t.Fatalf("a note with a mark waiting: %+v %v, want s2's mark reported", ans, err)
	}
}

// A tenure's release drops the key and its record and, in the same step,
// leaves the releasing sidecar's mark (or removes it); it announces the
// release as Release does.
func testTenureRelease(t *testing.T, s *suite) {
	n := s.tenure(t)
	c := s.watch(t, s.key)
	s.prime(t, s.key, c)
	mark := redlock.WaiterMark{Sidecar: "s1", Arrival: 42, TTL: longTTL}
	replies := s.watchMessages(t, n, "ch-s9", func() {
		if _, err := n.ReleaseTenure(s.ctx, s.tkeys(), "nobody", redlock.WaiterMark{Sidecar: "x"}, "ch-s9"); err != nil {
			t.Fatal(err)
		}
		s.take(t, n, takeArgs("P", "p", 1, 4))
		if _, err := n.ReleaseTenure(s.ctx, s.tkeys(), "P", redlock.WaiterMark{Sidecar: "p"}, "ch-s9"); err != nil {
			t.Fatal(err)
		}
	})
	base := c.count()
	s.take(t, n, takeArgs("A", "s1", 1, 4))
	if ok, err := n.ReleaseTenure(s.ctx, s.tkeys(), "A", mark, "ch-s9"); err != nil || !ok {
		t.Fatalf("ReleaseTenure: %v %v", ok, err)
	}
	if got := replies.wait(t, 1); len(got) != 1 || got[0] != "r "+s.key {
		t.Fatalf("messages to the wanting sidecar: %q, want one release of the key", got)
	}
	if r := s.holder(t, n); r.Value != "" || r.Record.Value != "" {
		t.Fatalf("after the release: %+v, want no key and no record", r)
	}
	waitCount(t, "release watcher", c, base+1)
	if got := s.take(t, n, takeArgs("B", "s2", 50, 4)); got.Acquired || !got.ByMark || got.Oldest.Arrival != 42 {
		t.Fatalf("a younger caller after a release that left a mark: %+v, want refused by it", got)
	}
	if ok, err := n.ReleaseTenure(s.ctx, s.tkeys(), "nobody", redlock.WaiterMark{Sidecar: "s1"}, ""); err != nil || ok {
		t.Fatalf("ReleaseTenure of another value: %v %v", ok, err)
	}
	if got := s.take(t, n, takeArgs("B", "s2", 50, 4)); !got.Acquired {
		t.Fatalf("after the mark was removed: %+v, want taken", got)
	}
}

// Without fencing a take writes a record with no fence, and no counter.
func testTenureUnfenced(t *testing.T, s *suite) {
	n := s.tenure(t)
	a := takeArgs("A", "s1", 1, 4)
	a.Fencing = redlock.FenceNone
	if got := s.take(t, n, a); !got.Acquired || got.Committed || got.Fence != 0 {
		t.Fatalf("unfenced take: %+v", got)
	}
	if r := s.holder(t, n); r.Counter != 0 || r.Record.Value != "A" || r.Record.Fence != 0 || r.Record.Owner != "o-A" {
		t.Fatalf("after it: %+v", r)
	}
}
