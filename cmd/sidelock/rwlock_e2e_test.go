package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// rwScript is the command of each exec below: it appends "start <ns>" to
// the file $1, tells the test what exec gave it, waits for its stdin to
// close when $2 is "wait", and appends "end <ns>" last, so that the test
// can tell from the files whether two commands ever ran at once.
const rwScript = `echo "start $(date +%s%N)" >> "$1"
echo "mode $SIDELOCK_MODE slot ${SIDELOCK_SLOT:-none} fence $SIDELOCK_FENCE name $SIDELOCK_LOCK_NAME"
if [ "$2" = wait ]; then read x || true; fi
echo "end $(date +%s%N)" >> "$1"`

// Two `exec --mode shared`, on two sidecars over the same masters, run at
// once; an `exec --mode exclusive --wait` started meanwhile waits (its
// intent bars new readers: writer_waiting, and a third reader is refused)
// and runs only once both readers ended, never overlapping either; it
// gets SIDELOCK_MODE and a fence, each reader a slot of its own.
func TestE2EExecRWLockWriterRunsAfterTheReaders(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	dir := t.TempDir()
	const name = "rw/books"
	startExec := func(s *sidecar, file, wait string, flags ...string) *cliChild {
		args := append(append([]string{"exec"}, flags...), name, "--", "sh", "-c", rwScript, "sh", filepath.Join(dir, file), wait)
		return startCLI(t, s, args...)
	}

	var readers []*cliChild
	slots := map[string]bool{}
	for i, s := range []*sidecar{a, b} {
		r := startExec(s, fmt.Sprint("reader", i), "wait", "--mode", "shared")
		env := commandSaw(t, r)
		if env["mode"] != "shared" || env["slot"] == "none" || env["fence"] != "0" || env["name"] != name {
			t.Fatalf("reader %d saw %v", i, env)
		}
		slots[env["slot"]] = true
		readers = append(readers, r)
	}
	if len(slots) != 2 {
		t.Fatalf("both readers read in slot %v", slots)
	}

	writer := startExec(a, "writer", "", "--mode", "exclusive", "--wait", "10s")
	inspect := client.New(b.api, nil)
	eventually(t, 5*time.Second, "the writer's intent shows", func() bool {
		st, err := inspect.InspectRWLock(context.Background(), name)
		return err == nil && st.WriterWaiting && st.ReaderCount == 2 && st.Writer == nil
	})
	if r := runCLI(t, apiEnv(b), "exec", "--mode", "shared", name, "--", "true"); r.code != exitNotAcquired || !strings.Contains(r.stderr, "admits no reader") {
		t.Errorf("a reader while a writer waits: %v", r)
	}
	for i, r := range readers {
		writer.noLine(t, fmt.Sprintf("the writer ran while reader %d still read", i))
		r.stdin.Close()
		if code := r.exit(t); code != 0 {
			t.Fatalf("reader %d: exit %d, %s", i, code, r.stderr)
		}
	}
	env := commandSaw(t, writer)
	if env["mode"] != "exclusive" || env["slot"] != "none" || env["fence"] == "0" {
		t.Errorf("the writer saw %v", env)
	}
	if code := writer.exit(t); code != 0 {
		t.Fatalf("the writer: exit %d, %s", code, writer.stderr)
	}

	r0, r1, w := ranFrom(t, dir, "reader0"), ranFrom(t, dir, "reader1"), ranFrom(t, dir, "writer")
	if !r0.overlaps(r1) {
		t.Errorf("the readers %v and %v did not run at once", r0, r1)
	}
	if w.overlaps(r0) || w.overlaps(r1) || w.start < max(r0.end, r1.end) {
		t.Errorf("the writer %v overlapped the readers %v and %v", w, r0, r1)
	}
}

// Readers on two sidecars share a read/write lock; a writer is refused
// meanwhile, and each reader is extended and released by its token alone.
// The lock and the semaphore of the same name are unrelated.
func TestE2ERWLockClientCalls(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	ca, cb := client.New(a.api, nil), client.New(b.api, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const name = "rw/calls"
	first, err := ca.AcquireRWLock(ctx, name, client.Shared, client.Options{Owner: "first", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	second, err := cb.AcquireRWLock(ctx, name, client.Shared, client.Options{Owner: "second", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if first.Mode != client.Shared || first.Slot == 0 || first.Slot == second.Slot || first.Fence != 0 {
		t.Fatalf("readers %+v and %+v", first, second)
	}
	if _, err := ca.AcquireRWLock(ctx, name, client.Exclusive, client.Options{Owner: "writer"}); !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("a writer while two read: %v, want ErrLockHeld", err)
	}
	if lock, err := ca.Acquire(ctx, name, client.Options{}); err != nil {
		t.Errorf("the lock %q, unrelated to the read/write lock: %v", name, err)
	} else {
		_ = ca.Release(ctx, name, lock.Token)
	}
	for _, r := range []struct {
		c *client.Client
		l client.Lease
	}{{ca, first}, {cb, second}} {
		if l, err := r.c.ExtendRWLock(ctx, name, r.l.Token, time.Minute); err != nil || l.Slot != r.l.Slot || l.Mode != client.Shared {
			t.Errorf("extending reader %s: %+v, %v", r.l.Owner, l, err)
		}
	}
	st, err := cb.InspectRWLock(ctx, name)
	if err != nil || st.Writer != nil || st.ReaderCount != 2 || len(st.Readers) != 2 {
		t.Fatalf("inspection %+v, %v", st, err)
	}
	if err := ca.ReleaseRWLock(ctx, name, first.Token); err != nil {
		t.Fatal(err)
	}
	if err := cb.ReleaseRWLock(ctx, name, second.Token); err != nil {
		t.Fatal(err)
	}
	writer, err := ca.AcquireRWLock(ctx, name, client.Exclusive, client.Options{Owner: "writer", Wait: 5 * time.Second})
	if err != nil || writer.Mode != client.Exclusive || writer.Fence == 0 || writer.Slot != 0 {
		t.Fatalf("the writer once the readers left: %+v, %v", writer, err)
	}
	if _, err := ca.ExtendRWLock(ctx, name, first.Token, 0); !errors.Is(err, client.ErrLeaseGone) {
		t.Errorf("extending a released reader: %v, want ErrLeaseGone", err)
	}
}

// commandSaw reads the line rwScript prints: what exec put in the
// command's environment, by word.
func commandSaw(t *testing.T, c *cliChild) map[string]string {
	t.Helper()
	f := strings.Fields(c.line(t))
	if len(f)%2 != 0 {
		t.Fatalf("the command printed %q", f)
	}
	env := map[string]string{}
	for i := 0; i < len(f); i += 2 {
		env[f[i]] = f[i+1]
	}
	return env
}

// span is when a command ran, in nanoseconds of the wall clock.
type span struct{ start, end int64 }

func (s span) overlaps(o span) bool { return s.start < o.end && o.start < s.end }

// ranFrom reads the start and end rwScript wrote to dir/file.
func ranFrom(t *testing.T, dir, file string) span {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	var s span
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		what, ns, _ := strings.Cut(l, " ")
		v, err := strconv.ParseInt(ns, 10, 64)
		if err != nil {
			t.Fatalf("%s: %q", file, l)
		}
		switch what {
		case "start":
			s.start = v
		case "end":
			s.end = v
		}
	}
	if s.start == 0 || s.end < s.start {
		t.Fatalf("%s: %q is not a start and an end", file, b)
	}
	return s
}

// --mode is shared or exclusive, and excludes --permits and --leader.
func TestExecModeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "read", "x", "--", "true"},
		{"--mode", "", "x", "--", "true"},
		{"--mode", "shared", "--permits", "2", "x", "--", "true"},
		{"--permits", "2", "--mode", "exclusive", "x", "--", "true"},
		{"--mode", "exclusive", "--leader", "x", "--", "true"},
	} {
		_, err := parseExec(args, func(string) string { return "" }, nil)
		var ec *exitCode
		if !errors.As(err, &ec) || ec.code != exitUsage {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	for _, mode := range []client.Mode{client.Shared, client.Exclusive} {
		o, err := parseExec([]string{"--mode", string(mode), "x", "--", "true"}, func(string) string { return "" }, nil)
		if err != nil || o.mode != mode || o.permits != 0 {
			t.Errorf("--mode %s: %+v, %v", mode, o, err)
		}
	}
}
