package leasecheck

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestBrokenPromises(t *testing.T) {
	ps := []Promise{
		{Key: "a", Granted: at(0), End: at(100)},
		{Key: "a", Granted: at(100), End: at(300)}, // at the end: kept
		{Key: "a", Granted: at(250), End: at(400)}, // 50ms inside the second
		{Key: "b", Granted: at(120), End: at(200)}, // another key
		{Key: "", Granted: at(0), End: at(500)},    // shared: not judged
		{Key: "a", Granted: at(350), End: at(360)}, // 50ms inside the third
	}
	n, worst := BrokenPromises(ps)
	if n != 2 || worst == nil || worst.Earlier != 1 || worst.Later != 2 || worst.By != 50*time.Millisecond {
		t.Fatalf("got %d, %+v", n, worst)
	}
	if n, worst := BrokenPromises(ps[:2]); n != 0 || worst != nil {
		t.Fatalf("kept promises judged broken: %d %+v", n, worst)
	}
}

func TestFenceOrderAndOverlaps(t *testing.T) {
	ss := []Section{
		{Key: "a", Fence: 5, Enter: at(0), Exit: at(100)},
		{Key: "a", Fence: 7, Enter: at(150), Exit: at(200)},
		{Key: "a", Fence: 6, Enter: at(250), Exit: at(300)}, // below 7, which ended
		{Key: "a", Fence: 9, Enter: at(280), Exit: at(320)}, // overlaps the third
		{Key: "b", Fence: 1, Enter: at(0), Exit: at(400)},
	}
	if n, v := FenceOrder(ss); n != 1 || v.Section != 2 || v.Highest != 7 {
		t.Fatalf("fence order: %d %+v", n, v)
	}
	if n, o := Overlaps(ss); n != 1 || o.Earlier != 2 || o.Later != 3 {
		t.Fatalf("overlaps: %d %+v", n, o)
	}
	if n, _ := Overlaps(ss[:3]); n != 0 {
		t.Fatalf("%d overlaps in sections that never overlap", n)
	}
}
