package memnode

import (
	"errors"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// redlock.ServerInfo(info) must keep compiling: it is how callers turn
// memnode's ServerInfo into redlock's.
var _ = redlock.ServerInfo(ServerInfo{})

func TestServerInfoDescribesAFreshMaster(t *testing.T) {
	clock := newFakeClock()
	n := New("mem", WithClock(clock.Now))
	clock.Advance(3 * time.Second)
	info, err := n.ServerInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(info.RunID) != 40 || info.Uptime != 3*time.Second || info.Role != "master" || !info.PersistenceKnown || info.AppendOnly {
		t.Fatalf("info %+v, want a 40-char run id, 3s uptime, master, persistence known and off", info)
	}
	if redlock.ServerInfo(info).Durable() {
		t.Fatal("a memnode reports itself durable")
	}
	if other, _ := New("other").ServerInfo(t.Context()); other.RunID == info.RunID {
		t.Fatal("two nodes share a run id")
	}
}

func TestRestartForgetsKeysAndChangesIdentity(t *testing.T) {
	clock := newFakeClock()
	n := New("mem", WithClock(clock.Now))
	ctx := t.Context()
	if ok, _, err := n.Acquire(ctx, "k", "A", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	clock.Advance(time.Hour)
	before, _ := n.ServerInfo(ctx)
	n.Restart()
	clock.Advance(time.Second)
	after, _ := n.ServerInfo(ctx)
	if after.RunID == before.RunID || after.Uptime != time.Second {
		t.Fatalf("after Restart: %+v, before %+v; want a new run id and 1s uptime", after, before)
	}
	if v, _, _ := n.Get(ctx, "k"); v != "" {
		t.Fatalf("key survived Restart: %q", v)
	}
	if ok, _, _ := n.Acquire(ctx, "k", "B", time.Minute); !ok {
		t.Fatal("another value cannot take the forgotten key")
	}
}

func TestSetServerInfoOverridesAndSurvivesRestart(t *testing.T) {
	n := New("mem")
	n.SetServerInfo(func(i ServerInfo) ServerInfo {
		i.Role, i.AppendOnly, i.AppendFsync = "slave", true, "always"
		return i
	})
	n.Restart()
	info, _ := n.ServerInfo(t.Context())
	if info.Role != "slave" || !redlock.ServerInfo(info).Durable() {
		t.Fatalf("override lost: %+v", info)
	}
	n.SetServerInfo(nil)
	if info, _ := n.ServerInfo(t.Context()); info.Role != "master" {
		t.Fatalf("override not removed: %+v", info)
	}
}

func TestServerInfoFailsWhileDown(t *testing.T) {
	n := New("mem")
	n.SetDown(true)
	if _, err := n.ServerInfo(t.Context()); !errors.Is(err, ErrDown) {
		t.Fatalf("ServerInfo while down: %v, want ErrDown", err)
	}
}
