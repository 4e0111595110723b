package redisnode

import (
	"testing"
	"time"
)

// A batch leaves out a call that waited in the queue past its sendBy (the
// master would not get its whole timeout; its caller fails it as unsent),
// but takes one whose caller allowed less than the send timeout from the
// start, and records the master's health as each call is sent, so that
// the call's own batch failing later does not rewrite it.
func TestTakeLeavesLateCallsAndRecordsHealthAtSending(t *testing.T) {
	p := newPipeliner(nil, 1)
	now := time.Now()
	onTime := &call{queued: now.Add(-10 * time.Millisecond), sendBy: now.Add(40 * time.Millisecond), sendTimeout: 50 * time.Millisecond}
	late := &call{queued: now.Add(-60 * time.Millisecond), sendBy: now.Add(-10 * time.Millisecond), sendTimeout: 50 * time.Millisecond}
	short := &call{queued: now.Add(-time.Millisecond), sendBy: now.Add(-20 * time.Millisecond), sendTimeout: 50 * time.Millisecond}
	plain := &call{queued: now.Add(-time.Second)} // no send budget: never late
	p.queue = []*call{onTime, late, short, plain}
	p.healthy.Store(true)

	batch := p.take()
	if len(batch) != 3 || batch[0] != onTime || batch[1] != short || batch[2] != plain {
		t.Fatalf("batch %v, want the on-time, the short and the plain call", batch)
	}
	if late.taken || !late.abandoned {
		t.Fatalf("the late call: taken %v, abandoned %v; want left out", late.taken, late.abandoned)
	}

	p.healthy.Store(false) // the batch itself failed
	if sent, healthy := p.sentWhile(onTime); !sent || !healthy {
		t.Fatalf("a sent call: sent %v, healthy %v; want the health as it was sent (true)", sent, healthy)
	}
	if sent, _ := p.sentWhile(late); sent {
		t.Fatal("the late call reads as sent")
	}
}
