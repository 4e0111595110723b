package redisnode

import (
	"testing"
	"time"
)

func TestMillisecondsRoundsUpToAtLeastOne(t *testing.T) {
	for ttl, want := range map[time.Duration]int64{
		-time.Second:            1,
		0:                       1,
		time.Nanosecond:         1,
		time.Millisecond:        1,
		time.Millisecond + 1:    2,
		1500 * time.Microsecond: 2,
		30 * time.Second:        30000,
	} {
		if got := milliseconds(ttl); got != want {
			t.Errorf("milliseconds(%v) = %d, want %d", ttl, got, want)
		}
	}
}
