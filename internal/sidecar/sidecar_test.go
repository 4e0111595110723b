package sidecar

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/redistest"
)

// testConfig is the shipped configuration with loopback listeners on
// ports of their own.
func testConfig(t *testing.T) config.Config {
	t.Helper()
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.ListenAddr, cfg.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	return cfg
}

func devConfig(t *testing.T) config.Config {
	cfg := testConfig(t)
	cfg.Dev, cfg.RedisAddrs, cfg.RedisGroups = true, nil, ""
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A dev-mode sidecar is ready when New returns, serves the lock API and
// the admin endpoints while it runs, and ends its leases when its context
// ends.
func TestSidecarServesUntilItsContextEnds(t *testing.T) {
	s, err := New(t.Context(), devConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.checker.Report().Ready {
		t.Fatalf("not ready after New's health rounds: %+v", s.checker.Report())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	res, err := http.Post("http://"+s.APIAddr()+"/locks/demo?ttl=30s", "", nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("acquire: %v %v", res, err)
	}
	res.Body.Close()
	res, err = http.Get("http://" + s.AdminAddr() + "/readyz")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", res, err)
	}
	var report struct {
		Masters []struct{ Addr string }
	}
	err = json.NewDecoder(res.Body).Decode(&report)
	res.Body.Close()
	if err != nil || len(report.Masters) != config.DevMasters || report.Masters[0].Addr != "memory-1" {
		t.Fatalf("readyz masters %+v, %v", report.Masters, err)
	}
	if s.leases.Len() != 1 {
		t.Fatalf("%d leases held, want 1", s.leases.Len())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := s.leases.Len(); n != 0 {
		t.Fatalf("%d leases left after the shutdown", n)
	}
	if _, err := net.DialTimeout("tcp", s.APIAddr(), time.Second); err == nil {
		t.Fatal("the lock API still accepts connections after Run returned")
	}
}

// A sidecar that cannot open its listeners gives back what it opened.
func TestNewClosesWhatItOpenedWhenItFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := devConfig(t)
	cfg.AdminAddr = taken.Addr().String()
	if _, err := New(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "admin listener") {
		t.Fatalf("New on a taken admin port: %v", err)
	}
	// The lock API's port was opened first; it must be free again.
	cfg = devConfig(t)
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close() // twice is fine
}

// Quorum groups are assembled each over its own masters and reported by
// name, and the sidecar counts every group's masters.
func TestGroupsAreAssembledByName(t *testing.T) {
	servers := redistest.StartN(t, 6, redistest.WithAppendOnly())
	addrs := make([]string, len(servers))
	for i, srv := range servers {
		addrs[i] = srv.Addr()
	}
	cfg := testConfig(t)
	cfg.RedisAddrs, cfg.RedisGroups = nil, "a="+strings.Join(addrs[:3], ",")+";b="+strings.Join(addrs[3:], ",")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.groups) != 2 || s.groups[0].Name() != "a" || s.groups[1].Name() != "b" || len(s.nodes) != 6 {
		t.Fatalf("groups %v, %d masters", s.groups, len(s.nodes))
	}
	r := s.checker.Report()
	if !r.Ready || len(r.Groups) != 2 || r.Groups[1].Name != "b" || r.Groups[1].Masters[0] != addrs[3] || r.Groups[1].Eligible != 3 {
		t.Fatalf("report %+v", r)
	}
	for g, l := range s.groups {
		for i := range l.Nodes() {
			if !l.Eligibility(i).Eligible {
				t.Errorf("group %d master %d not counted after the start-up rounds: %+v", g, i, l.Eligibility(i))
			}
		}
	}
}

func TestConnBudget(t *testing.T) {
	reserve := FDReserve(2, 3)
	for _, c := range []struct {
		maxConns int
		nofile   uint64
		ok       bool
	}{
		{1024, 0, true}, // unknown limit
		{1024, uint64(1024 + reserve), true},
		{1025, uint64(1024 + reserve), false},
		{16, uint64(reserve), false},
	} {
		err := checkConnBudget(c.maxConns, 2, 3, c.nofile)
		if (err == nil) != c.ok {
			t.Errorf("max conns %d, nofile %d: %v", c.maxConns, c.nofile, err)
		}
	}
	if FDReserve(4, 3) <= reserve {
		t.Error("more connections per master reserve no more descriptors")
	}
}

// WithChecksAfter moves the health rounds from New to d after Run begins,
// or drops them.
func TestChecksAfter(t *testing.T) {
	for _, c := range []struct {
		after time.Duration
		ready bool
	}{{50 * time.Millisecond, true}, {-1, false}} {
		s, err := New(t.Context(), devConfig(t), WithChecksAfter(c.after))
		if err != nil {
			t.Fatal(err)
		}
		if s.checker.Report().Ready {
			t.Fatalf("after %v: ready before any round", c.after)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		time.Sleep(time.Second)
		if got := s.checker.Report().Ready; got != c.ready {
			t.Errorf("after %v: ready %v a second into Run, want %v", c.after, got, c.ready)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}
