package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// mastersAt returns n masters whose clocks are frozen at t.
func mastersAt(n int, t time.Time) ([]*memnode.Node, []redlock.Node) {
	mem := make([]*memnode.Node, n)
	nodes := make([]redlock.Node, n)
	for i := range mem {
		mem[i] = memnode.New(fmt.Sprintf("m%d", i), memnode.WithClock(func() time.Time { return t }))
		nodes[i] = mem[i]
	}
	return mem, nodes
}

func takeReq(value string, block int64) redlock.TakeRequest {
	return redlock.TakeRequest{Key: "k", Value: value, TTL: 10 * time.Second, Block: block,
		Holder: redlock.HolderRecord{Grant: "g-" + value, Owner: "o-" + value, Channel: "ch"},
		Mark:   redlock.WaiterMark{Sidecar: "s-" + value, Arrival: 1}}
}

// Every fence of a block is below every fence granted after it, whatever
// majority each grant reached: takes with blocks of random sizes (their
// fences all handed out), hand-overs with a new block, and plain fenced
// acquires, each through a random majority. The masters' clocks are frozen
// long ago (the proposal is committed: one round) or far ahead (the floor
// refuses it: the commit round), so only the counters order the fences.
// Committing the block's first fence instead of its top fails it.
func TestBlocksStayBelowEveryLaterGrant(t *testing.T) {
	for _, tc := range []struct {
		name    string
		masters int
		clock   time.Time
	}{
		{"one master", 1, time.Unix(1_700_000_000, 0)},
		{"three masters, proposals committed", 3, time.Unix(1_700_000_000, 0)},
		{"five masters, proposals committed", 5, time.Unix(1_700_000_000, 0)},
		{"three masters, commit rounds", 3, time.Now().Add(24 * time.Hour)},
		{"five masters, commit rounds", 5, time.Now().Add(24 * time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, nodes := mastersAt(tc.masters, tc.clock)
			l, err := redlock.New(nodes, redlock.Config{Fencing: true})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, uint64(tc.masters)))
			var top int64
			prev := ""
			var chain []string // the values since the key was last cleared
			// clear clears the key everywhere (masters a hand-over missed
			// may still hold an earlier value of the chain), as releases
			// plus expiry would; the counters stay.
			clear := func() {
				for _, m := range mem {
					m.SetDown(false)
					for _, v := range chain {
						m.Release(context.Background(), "k", v)
					}
				}
				chain = chain[:0]
			}
			for i := range 300 {
				value := fmt.Sprintf("v%d", i)
				down := rng.Perm(len(mem))[:rng.IntN(len(mem)/2+1)]
				for _, d := range down {
					mem[d].SetDown(true)
				}
				var first, last int64
				kind := rng.IntN(3)
				if prev != "" {
					kind = 2 // the key is still the previous holder's: hand it over
				}
				switch kind {
				case 0:
					g, err := l.Acquire(context.Background(), "k", value, 10*time.Second)
					if err != nil {
						t.Fatalf("acquire %s: %v", value, err)
					}
					first, last = g.Fence, g.Fence
				default:
					req := takeReq(value, 1+rng.Int64N(16))
					if prev != "" {
						req.From, req.Floor = prev, top // a hand-over from the previous holder
					}
					got, err := l.Take(context.Background(), req)
					if req.From != "" && errors.Is(err, redlock.ErrLockHeld) {
						// Masters a hand-over of the chain missed still
						// hold an earlier value: clear it, take afresh.
						clear()
						req.From = ""
						got, err = l.Take(context.Background(), req)
					}
					if err != nil {
						t.Fatalf("take %s (%+v): %v", value, req, err)
					}
					if got.Top-got.First+1 != req.Block {
						t.Fatalf("take %s: block %d..%d, want %d fences", value, got.First, got.Top, req.Block)
					}
					first, last = got.First, got.Top
				}
				for _, d := range down {
					mem[d].SetDown(false)
				}
				if first <= top {
					t.Fatalf("grant %d (%s, %v down) starts at %d, not above the previous block's top %d", i, value, down, first, top)
				}
				top, prev = last, ""
				chain = append(chain, value)
				if kind != 0 && rng.IntN(2) == 0 {
					prev = value // the next grant hands it over
					continue
				}
				clear()
			}
		})
	}
}

// A hand-over through Take replaces the giver's value in one step, with a
// block above the giver's; another value is refused.
func TestTakeHandsOver(t *testing.T) {
	_, nodes := masters(3)
	l, err := redlock.New(nodes, redlock.Config{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.Take(context.Background(), takeReq("A", 4))
	if err != nil {
		t.Fatal(err)
	}
	req := takeReq("B", 4)
	req.From, req.Floor = "A", a.Top
	b, err := l.Take(context.Background(), req)
	if err != nil || b.First <= a.Top {
		t.Fatalf("hand-over: %+v %v, want a block above %d", b, err, a.Top)
	}
	h, err := l.Inspect(context.Background(), "k")
	if err != nil || h.Value != "B" || h.Fence != b.First || h.Owner != "o-B" {
		t.Fatalf("after the hand-over: %+v %v", h, err)
	}
	req = takeReq("C", 4)
	req.From = "A"
	if _, err := l.Take(context.Background(), req); !errors.Is(err, redlock.ErrLockHeld) {
		t.Fatalf("hand-over from a value that no longer holds it: %v, want held", err)
	}
}

// Inspect names the holder from its record: the block's first fence, not
// the counter's top, then each later note; a record that does not belong
// to the key's value is ignored (the counter, as before blocks).
func TestInspectNamesTheRecordedHolder(t *testing.T) {
	_, nodes := masters(3)
	l, err := redlock.New(nodes, redlock.Config{Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := l.Take(ctx, takeReq("A", 8))
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Inspect(ctx, "k")
	if err != nil || !h.Held || !h.Recorded || h.Fence != got.First || h.Owner != "o-A" || h.Grant != "g-A" || h.Idle {
		t.Fatalf("after the take: %+v %v, want the first fence %d", h, err, got.First)
	}
	note := redlock.HolderRecord{Value: "A", Fence: got.First + 2, Grant: "g2", Owner: "o2", Channel: "ch", Seq: 1}
	if _, err := l.NoteHolder(ctx, "k", note, "s-A"); err != nil {
		t.Fatal(err)
	}
	if h, _ := l.Inspect(ctx, "k"); h.Fence != got.First+2 || h.Owner != "o2" || h.Grant != "g2" {
		t.Fatalf("after a note: %+v", h)
	}
	note.Idle, note.IdleTTL, note.Seq = true, time.Second, 2
	if _, err := l.NoteHolder(ctx, "k", note, "s-A"); err != nil {
		t.Fatal(err)
	}
	if h, _ := l.Inspect(ctx, "k"); !h.Held || !h.Idle {
		t.Fatalf("after an idle note: %+v, want held by an idle holder", h)
	}
	if err := l.ReleaseTenure(ctx, "k", "A", redlock.WaiterMark{Sidecar: "s-A"}, ""); err != nil {
		t.Fatal(err)
	}
	g, err := l.Acquire(ctx, "k", "old", 10*time.Second) // an older sidecar: no record
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := l.Inspect(ctx, "k"); h.Recorded || h.Fence != g.Fence || h.Value != "old" {
		t.Fatalf("a key taken without a record: %+v, want the counter %d", h, g.Fence)
	}
}

// A take refused by a holder that only lingers says so, and the holder's
// sidecar hears "wanted" with the caller's mark.
func TestTakeRefusedByAnIdleHolder(t *testing.T) {
	_, nodes := masters(3)
	l := newLocker(t, nodes)
	ctx := context.Background()
	a, err := l.Take(ctx, takeReq("A", 4))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heard []redlock.Message
	cancel := l.WatchChannel("ch", func(w redlock.Message) {
		mu.Lock()
		heard = append(heard, w)
		mu.Unlock()
	})
	defer cancel()
	idle := redlock.HolderRecord{Value: "A", Fence: a.First, Channel: "ch", Idle: true, IdleTTL: 500 * time.Millisecond, Seq: 1}
	if _, err := l.NoteHolder(ctx, "k", idle, "s-A"); err != nil {
		t.Fatal(err)
	}
	req := takeReq("B", 4)
	req.Mark = redlock.WaiterMark{Sidecar: "s-B", Arrival: 77, TTL: time.Second}
	_, err = l.Take(ctx, req)
	var held *redlock.HeldError
	if !errors.As(err, &held) || !held.Idle || held.IdleFor <= 0 || held.IdleFor > 500*time.Millisecond {
		t.Fatalf("take from an idle holder: %v (%+v), want held by an idle holder", err, held)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 3 || heard[0].Kind != redlock.MessageWanted || heard[0].Key != "k" || heard[0].Mark.Arrival != 77 || heard[0].Mark.TTL != time.Second || heard[0].ReplyTo != "ch" {
		t.Fatalf("wanted heard: %+v, want one per master for arrival 77", heard)
	}
}

// Waiters of several sidecars take a free key in the order of their
// marks, and the one that gets it learns of the others.
func TestMarksOrderTheWaitersOfSidecars(t *testing.T) {
	_, nodes := masters(3)
	l := newLocker(t, nodes)
	ctx := context.Background()
	if _, err := l.Take(ctx, takeReq("A", 4)); err != nil {
		t.Fatal(err)
	}
	waiter := func(value string, arrival int64) redlock.TakeRequest {
		r := takeReq(value, 4)
		r.Mark = redlock.WaiterMark{Sidecar: "s-" + value, Arrival: arrival, TTL: 10 * time.Second}
		return r
	}
	for _, w := range []redlock.TakeRequest{waiter("C", 20), waiter("B", 10)} {
		if _, err := l.Take(ctx, w); !errors.Is(err, redlock.ErrLockHeld) {
			t.Fatalf("waiter %s of a held key: %v", w.Value, err)
		}
	}
	if err := l.ReleaseTenure(ctx, "k", "A", redlock.WaiterMark{Sidecar: "s-A"}, ""); err != nil {
		t.Fatal(err)
	}
	_, err := l.Take(ctx, waiter("C", 20))
	var held *redlock.HeldError
	if !errors.As(err, &held) || !held.ByMark || held.Oldest.Arrival != 10 || held.RetryAfter <= 0 {
		t.Fatalf("the younger waiter: %v %+v, want refused by B's mark", err, held)
	}
	got, err := l.Take(ctx, waiter("B", 10))
	if err != nil || got.Oldest.Arrival != 20 || got.Oldest.Sidecar != "s-C" {
		t.Fatalf("the oldest waiter: %+v %v, want granted, told of C's mark", got, err)
	}
	// B lets go to C, keeping a place for its own next caller (arrival 30).
	if err := l.ReleaseTenure(ctx, "k", "B", redlock.WaiterMark{Sidecar: "s-B", Arrival: 30, TTL: 10 * time.Second}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Take(ctx, waiter("D", 25)); err != nil {
		// D (25) is older than B's next (30) but younger than C (20).
		if !errors.Is(err, redlock.ErrLockHeld) {
			t.Fatal(err)
		}
	} else {
		t.Fatal("D was granted ahead of C's older mark")
	}
	if _, err := l.Take(ctx, waiter("C", 20)); err != nil {
		t.Fatalf("C after B let go: %v", err)
	}
}
