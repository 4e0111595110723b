package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// A semaphore of 2 admits two holders, on two sidecars, in two different
// slots; the third is refused (ErrLockHeld) until one gives its permit
// back, and then gets that slot. A caller that asks for another number
// of permits is refused (ErrPermitsMismatch). Locks of the same name are
// unrelated.
func TestE2ESemaphoreAdmitsAtMostNHolders(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	ca, cb := client.New(a.api, nil), client.New(b.api, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const name = "pool/db"
	first, err := ca.AcquireSemaphore(ctx, name, 2, client.Options{Owner: "first", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	second, err := cb.AcquireSemaphore(ctx, name, 2, client.Options{Owner: "second", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if first.Permits != 2 || second.Permits != 2 || first.Slot == second.Slot || first.Slot+second.Slot != 3 {
		t.Fatalf("permits %+v and %+v, want slots 1 and 2 of 2", first, second)
	}
	if _, err := ca.AcquireSemaphore(ctx, name, 2, client.Options{Owner: "third"}); !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("a third permit of 2: %v, want ErrLockHeld", err)
	}
	st, err := cb.InspectSemaphore(ctx, name, 2)
	if err != nil || st.Held != 2 || len(st.Holders) != 2 || st.Holders[0].Slot != 1 || st.Holders[1].Slot != 2 {
		t.Fatalf("inspection %+v, %v", st, err)
	}
	if lock, err := ca.Acquire(ctx, name, client.Options{}); err != nil {
		t.Errorf("the lock %q, unrelated to the semaphore: %v", name, err)
	} else {
		_ = ca.Release(ctx, name, lock.Token)
	}
	if _, err := ca.AcquireSemaphore(ctx, name, 3, client.Options{}); !errors.Is(err, client.ErrPermitsMismatch) {
		t.Errorf("3 permits while this sidecar holds one of 2: %v, want ErrPermitsMismatch", err)
	}

	if err := ca.ReleaseSemaphore(ctx, name, first.Token); err != nil {
		t.Fatal(err)
	}
	third, err := cb.AcquireSemaphore(ctx, name, 2, client.Options{Owner: "third", Wait: 5 * time.Second})
	if err != nil || third.Slot != first.Slot {
		t.Fatalf("after a release: %+v, %v; want slot %d", third, err, first.Slot)
	}
	if _, err := ca.ExtendSemaphore(ctx, name, first.Token, 0); !errors.Is(err, client.ErrLeaseGone) {
		t.Errorf("extending a released permit: %v, want ErrLeaseGone", err)
	}
}

// A waiter for a permit is granted one as soon as a holder (on another
// sidecar) releases it.
func TestE2ESemaphoreWaiterGetsTheReleasedPermit(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	ca, cb := client.New(a.api, nil), client.New(b.api, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var holders []client.Lease
	for range 2 {
		l, err := ca.AcquireSemaphore(ctx, "pool/waited", 2, client.Options{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, l)
	}
	granted := make(chan error, 1)
	go func() {
		_, err := cb.AcquireSemaphore(ctx, "pool/waited", 2, client.Options{Wait: 8 * time.Second})
		granted <- err
	}()
	eventually(t, 5*time.Second, "the waiter is queued", func() bool { return metricValue(t, b, "sidelock_waiters") == 1 })
	released := time.Now()
	if err := ca.ReleaseSemaphore(ctx, "pool/waited", holders[1].Token); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("granted %v after the release", d)
	}
}

// `sidelock exec --permits 2` runs the command with SIDELOCK_SLOT; a third
// exec while two run is not admitted (75), and gets the slot the first
// gives back; another number of permits than the running ones' is a
// usage error (64).
func TestE2EExecPermits(t *testing.T) {
	a := startSidecar(t, durableMasters(t, 3))
	script := `echo "slot $SIDELOCK_SLOT fence $SIDELOCK_FENCE name $SIDELOCK_LOCK_NAME token ${#SIDELOCK_TOKEN}"; read x || true`
	var running []*cliChild
	slots := map[string]bool{}
	for range 2 {
		c := startCLI(t, a, "exec", "--permits", "2", "pool/jobs", "--", "sh", "-c", script)
		f := strings.Fields(c.line(t))
		if len(f) != 8 || f[0] != "slot" || f[5] != "pool/jobs" || f[7] != "32" || f[3] == "0" {
			t.Fatalf("the command saw %q", f)
		}
		slots[f[1]] = true
		running = append(running, c)
	}
	if !slots["1"] || !slots["2"] {
		t.Fatalf("slots %v, want 1 and 2", slots)
	}
	r := runCLI(t, apiEnv(a), "exec", "--permits", "2", "pool/jobs", "--", "true")
	if r.code != exitNotAcquired || !strings.Contains(r.stderr, "permits") {
		t.Errorf("a third exec: %v", r)
	}
	if r := runCLI(t, apiEnv(a), "exec", "--permits", "3", "pool/jobs", "--", "true"); r.code != exitUsage {
		t.Errorf("another number of permits: %v", r)
	}

	running[0].stdin.Close()
	if code := running[0].exit(t); code != 0 {
		t.Fatalf("the first exec: exit %d, %s", code, running[0].stderr)
	}
	r = runCLI(t, apiEnv(a), "exec", "--permits", "2", "--wait", "5s", "pool/jobs", "--", "sh", "-c", `echo "slot $SIDELOCK_SLOT"`)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "slot ") {
		t.Errorf("after a permit was given back: %v", r)
	}
	running[1].stdin.Close()
	if code := running[1].exit(t); code != 0 {
		t.Errorf("the second exec: exit %d", code)
	}
}

// --permits out of 1..64 and with --leader are mistakes.
func TestExecPermitsAndLeaderUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--permits", "0", "x", "--", "true"},
		{"--permits", "65", "x", "--", "true"},
		{"--permits", "-1", "x", "--", "true"},
		{"--permits", "2", "--leader", "x", "--", "true"},
		{"--leader", "--wait", "1s", "x", "--", "true"},
	} {
		_, err := parseExec(args, func(string) string { return "" }, nil)
		var ec *exitCode
		if !errors.As(err, &ec) || ec.code != exitUsage {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	o, err := parseExec([]string{"--permits", "64", "--owner", "o", "x", "--", "true"}, func(string) string { return "" }, nil)
	if err != nil || o.permits != 64 || o.leader {
		t.Errorf("--permits 64: %+v, %v", o, err)
	}
}
