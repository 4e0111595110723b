package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/pkg/client"
)

// execOptions are the flags and arguments of `sidelock exec`.
type execOptions struct {
	sidecar sidecarFlags
	opts    client.Options
	grace   time.Duration
	permits int         // > 0: hold one of the semaphore NAME's permits instead of the lock
	mode    client.Mode // != "": hold the read/write lock NAME in this mode instead of the lock
	leader  bool        // campaign for the lock NAME until elected
	name    string
	set     []string // a lock set's names in canonical order, when NAME names one
	argv    []string

	// conflict is the exit code of a lock held by another (--conflict-exit-code).
	conflict int
}

func parseExec(args []string, getenv func(string) string, stdout io.Writer) (execOptions, error) {
	var o execOptions
	fs := newFlags("exec")
	o.sidecar.addAPI(fs, getenv)
	addAcquireFlags(fs, &o.opts)
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "after SIGTERM on an expiring or lost lock, wait at most this long before SIGKILL (never past the lock's valid_until)")
	fs.IntVar(&o.permits, "permits", 0, "hold one of `N` permits of the semaphore NAME instead of the lock NAME (1..64; every caller must give the same N)")
	fs.StringVar((*string)(&o.mode), "mode", "", "hold the read/write lock NAME instead of the lock NAME, as `MODE` shared (one of many readers; SIDELOCK_SLOT says which reader slot) or exclusive (the one writer)")
	fs.BoolVar(&o.leader, "leader", false, "leader election: campaign for the lock NAME until elected, however long it takes (no --wait), then run the command as its leader")
	addConflictFlag(fs, &o.conflict)
	if err := parseFlags(fs, "exec", args, stdout); err != nil {
		return o, err
	}
	if err := checkConflictCode("exec", o.conflict); err != nil {
		return o, err
	}
	if err := checkExecMode(o, isSet(fs, "permits"), isSet(fs, "mode")); err != nil {
		return o, err
	}
	rest := fs.Args()
	if len(rest) < 3 || rest[1] != "--" {
		return o, usageError("exec", "exec needs NAME -- COMMAND [ARGS...]")
	}
	o.name, o.argv = rest[0], rest[2:]
	if err := o.parseName(); err != nil {
		return o, err
	}
	defaultOwner(&o.opts)
	return o, nil
}

// checkExecMode refuses --permits, --mode and --leader where they mean
// nothing: each names another kind of lease (a semaphore's permit, a
// read/write lock's read or write, a lock's leadership), and a campaign
// waits as long as it takes.
func checkExecMode(o execOptions, permitsSet, modeSet bool) error {
	switch {
	case permitsSet && (o.permits < 1 || o.permits > lease.MaxPermits):
		return usageError("exec", "--permits %d: a semaphore has 1 to %d permits", o.permits, lease.MaxPermits)
	case modeSet && o.mode != client.Shared && o.mode != client.Exclusive:
		return usageError("exec", "--mode %q: a read/write lock is held %q or %q", o.mode, client.Shared, client.Exclusive)
	case modeSet && permitsSet:
		return usageError("exec", "--mode and --permits exclude each other: a read/write lock has no permits")
	case modeSet && o.leader:
		return usageError("exec", "--leader and --mode exclude each other: a leader holds a lock")
	case o.leader && o.permits > 0:
		return usageError("exec", "--leader and --permits exclude each other: a leader holds a lock")
	case o.leader && o.opts.Wait != 0:
		return usageError("exec", "--leader waits until elected: no --wait (bound it with a signal, e.g. timeout(1))")
	}
	return nil
}

// parseName reads NAME: a lock set's names when it holds a "," (which
// lock names cannot), else one name. A set is exclusive locks only, taken
// now: no permits, no mode, no campaign.
func (o *execOptions) parseName() error {
	if !strings.Contains(o.name, ",") {
		return checkName("exec", o.name)
	}
	names, err := lease.SetNames(o.name)
	if err != nil {
		return usageError("exec", "lock set %q: %v", o.name, err)
	}
	switch {
	case o.permits > 0:
		return usageError("exec", "--permits and a lock set (NAME %q) exclude each other: a set holds locks", o.name)
	case o.mode != "":
		return usageError("exec", "--mode and a lock set (NAME %q) exclude each other: a set holds locks", o.name)
	case o.leader:
		return usageError("exec", "--leader and a lock set (NAME %q) exclude each other: a leader holds one lock", o.name)
	}
	o.set = names
	return nil
}

// runExec holds the lock for as long as the command runs. The command
// runs under a guard process (see exec_guard.go) that shares the lock's
// connection, so that the lock outlives exec, however exec ends, until
// the command and everything it started in its process group are dead.
func runExec(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseExec(args, getenv, stdout)
	if err != nil {
		return err
	}
	held, err := o.acquire(ctx, o.sidecar.client(getenv))
	if err != nil {
		return withConflictCode(o.acquireFailed(ctx, err), o.conflict)
	}
	defer held.Release()
	holdConn, err := dupForChild(held.Conn())
	if err != nil {
		return exitWith(exitUnavailable, "sharing the lock's connection with the command's guard: %w", err)
	}
	deadlines, guardDeadlines, err := newDeadlineRelay(held.Lease.ValidUntil)
	if err != nil {
		_ = holdConn.Close()
		return exitWith(exitUnavailable, "opening the deadline pipe to the command's guard: %w", err)
	}
	defer deadlines.close()
	// Caught before the guard starts, so that none of them can end exec
	// between its start and the supervision; forwarded once it runs.
	signals, stopSignals := notifyForwarded()
	defer stopSignals()
	cmd := guardCommand(o.argv, holdConn, guardDeadlines, commandEnv(held.Lease, held.locks), stdout, stderr)
	exited, err := startOnLockedThread(cmd)
	_, _ = holdConn.Close(), guardDeadlines.Close() // the guard has its own copies now
	if err != nil {
		return exitWith(exitCannotRun, "starting the command's guard: %v", err)
	}
	group := commandGroup{pgid: cmd.Process.Pid, exited: exited, deadlines: deadlines}
	return superviseCommand(group, signals, held.Held, o.grace, stderr)
}

// heldLease is what exec holds over one connection, with a lock set's
// locks (in canonical order; none for anything else).
type heldLease struct {
	*client.Held
	locks []client.SetLock
}

// acquire holds what the command runs under, over one connection: the
// lock, a lock set, a semaphore's permit, a read/write lock's read or
// write, or the lock once elected its leader.
func (o execOptions) acquire(ctx context.Context, c *client.Client) (heldLease, error) {
	if len(o.set) > 0 {
		set, err := c.HoldLockSet(ctx, o.set, o.opts)
		if err != nil {
			return heldLease{}, err
		}
		return heldLease{Held: set.Held, locks: set.Locks}, nil
	}
	held, err := o.acquireOne(ctx, c)
	return heldLease{Held: held}, err
}

// acquireOne holds one name: its lock, permit, read or write, or its
// leadership.
func (o execOptions) acquireOne(ctx context.Context, c *client.Client) (*client.Held, error) {
	switch {
	case o.leader:
		return c.Campaign(ctx, o.name, o.opts)
	case o.permits > 0:
		return c.HoldSemaphore(ctx, o.name, o.permits, o.opts)
	case o.mode != "":
		return c.HoldRWLock(ctx, o.name, o.mode, o.opts)
	default:
		return c.Hold(ctx, o.name, o.opts)
	}
}

// acquireFailed is acquireFailed with a lock set's, a semaphore's or a
// read/write lock's words: not acquired or admitted (75), or a
// semaphore's callers that disagree on its number of permits (64).
func (o execOptions) acquireFailed(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return acquireFailed(ctx, "exec", o.name, o.opts, o.sidecar.api, err)
	case len(o.set) > 0:
		return o.setNotAcquired(ctx, err)
	case o.permits == 0 && o.mode == "":
		return acquireFailed(ctx, "exec", o.name, o.opts, o.sidecar.api, err)
	case errors.Is(err, client.ErrPermitsMismatch):
		return usageError("exec", "semaphore %q is held or awaited on this sidecar with another number of permits than %d", o.name, o.permits)
	case errors.Is(err, client.ErrLockHeld):
		return o.notAdmitted()
	default:
		return acquireFailed(ctx, "exec", o.name, o.opts, o.sidecar.api, err)
	}
}

// notAdmitted says what kept a semaphore's permit or a read/write lock's
// read or write from exec, at once or within --wait.
func (o execOptions) notAdmitted() error {
	held, waited := fmt.Sprintf("all %d permits of semaphore %q are held", o.permits, o.name), "no permit of semaphore"
	switch o.mode {
	case client.Shared:
		held = fmt.Sprintf("read/write lock %q admits no reader: a writer holds or awaits it, or %d readers read", o.name, lease.MaxReaders)
		waited = "no read of read/write lock"
	case client.Exclusive:
		held = fmt.Sprintf("read/write lock %q admits no writer: readers or another writer hold it", o.name)
		waited = "no write of read/write lock"
	}
	if o.opts.Wait == 0 {
		return conflictWith("%s (try once: no --wait)", held)
	}
	return conflictWith("%s %q within --wait %v", waited, o.name, o.opts.Wait)
}

// setNotAcquired says why a lock set was not acquired: one of its locks
// held, at once or past --wait, or one ended while the set was being
// taken (the sidecar released the others: trying again is safe).
func (o execOptions) setNotAcquired(ctx context.Context, err error) error {
	var apiErr *client.Error
	switch {
	case errors.Is(err, client.ErrLockHeld) && o.opts.Wait == 0:
		return conflictWith("a lock of lock set %q is held by another (try once: no --wait)", o.name)
	case errors.Is(err, client.ErrLockHeld):
		return conflictWith("lock set %q not acquired within --wait %v", o.name, o.opts.Wait)
	case errors.As(err, &apiErr) && apiErr.Code == codeSetChanged:
		return conflictWith("lock set %q: %s", o.name, apiErr.Detail)
	default:
		return acquireFailed(ctx, "exec", o.name, o.opts, o.sidecar.api, err)
	}
}

// codeSetChanged is the sidecar's 409 when a lock of a set ended while the
// set was being taken; none of its locks is held then.
const codeSetChanged = "set_changed"

// leaseVars are the variables exec gives the command. Inherited ones are
// dropped first, so that a command under a nested exec never sees an
// outer lease's fence, slot or mode beside its own lease.
var leaseVars = []string{"SIDELOCK_LOCK_NAME", "SIDELOCK_TOKEN", "SIDELOCK_FENCE", "SIDELOCK_FENCES", "SIDELOCK_SLOT", "SIDELOCK_MODE"}

// commandEnv is exec's environment and the lease's name and token; the
// fence of a lock, or a lock set's fences (it has none of its own); for a
// semaphore's permit or a reader its slot, and for a read/write lock its
// mode.
func commandEnv(l client.Lease, locks []client.SetLock) []string {
	env := append(withoutLeaseVars(os.Environ()),
		"SIDELOCK_LOCK_NAME="+l.Name,
		"SIDELOCK_TOKEN="+l.Token)
	if len(locks) > 0 {
		env = append(env, "SIDELOCK_FENCES="+setFences(locks))
	} else {
		env = append(env, "SIDELOCK_FENCE="+strconv.FormatInt(l.Fence, 10))
	}
	if l.Slot > 0 {
		env = append(env, "SIDELOCK_SLOT="+strconv.Itoa(l.Slot))
	}
	if l.Mode != "" {
		env = append(env, "SIDELOCK_MODE="+string(l.Mode))
	}
	return env
}

func withoutLeaseVars(environ []string) []string {
	return slices.DeleteFunc(environ, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(leaseVars, k)
	})
}

// setFences is "name=fence,name=fence", the set's locks in canonical order.
func setFences(locks []client.SetLock) string {
	fences := make([]string, len(locks))
	for i, l := range locks {
		fences[i] = l.Name + "=" + strconv.FormatInt(l.Fence, 10)
	}
	return strings.Join(fences, ",")
}

// commandGroup is the guard's process group, which the command and all it
// starts are in, the guard's exit, and the relay of deadlines to it.
type commandGroup struct {
	pgid      int
	exited    <-chan error
	deadlines *deadlineRelay
}

// signal signals every process of the group; the guard outlives all but
// SIGKILL.
func (g commandGroup) signal(sig syscall.Signal) {
	_ = syscall.Kill(-g.pgid, sig)
}

// killLead is how long before valid_until the command is SIGKILLed at the
// latest, so that it is dead, not dying, when the promise runs out.
const killLead = 100 * time.Millisecond

// superviseCommand forwards signals to the command (see forwardedSignals)
// and makes sure it is dead by the lock's valid_until unless the lock is
// renewed:
//   - an "expiring" or "lost" event sends SIGTERM at once, and SIGKILL after
//     the grace period or just before valid_until, whichever is first;
//   - a watchdog SIGKILLs the command just before the last valid_until it
//     heard of, should the stream stall without saying anything;
//   - the guard is sent every valid_until heard of, and kills the command
//     just before the last one should exec itself stall (exec_guard.go).
//
// It returns once the guard has exited and the group is swept (the guard
// sweeps it too, unless it was killed itself), so that the lock is
// released after, never before, the last process of the command died.
func superviseCommand(group commandGroup, signals <-chan os.Signal, held *client.Held, grace time.Duration, stderr io.Writer) error {
	s := supervisor{group: group, name: held.Lease.Name, noun: leaseNoun(held.Lease.Name), grace: grace, stderr: stderr,
		maxHoldAt: held.Lease.MaxHoldAt}
	s.watch(held.Lease.ValidUntil)
	defer s.stopTimers()
	events := held.Events()
	for {
		select {
		case sig := <-signals:
			group.signal(sig.(syscall.Signal))
		case e, ok := <-events:
			if !ok {
				events = nil
				s.stop(held.End(), time.Time{})
				continue
			}
			s.event(e)
		case <-s.killC():
			group.signal(syscall.SIGKILL)
		case <-s.watchdogC():
			s.why = s.deadlineReason()
			fmt.Fprintf(stderr, "sidelock exec: %s %q %s; killing the command\n", s.noun, s.name, s.why)
			s.lost = true
			group.signal(syscall.SIGKILL)
		case err := <-group.exited:
			sweepGroup(group.pgid)
			if s.lost {
				return exitWith(exitLockLost, "%s %q was lost while the command ran (%s)", s.noun, s.name, s.why)
			}
			return commandResult(err)
		}
	}
}

// supervisor is superviseCommand's state: the deadline the command must be
// dead by, and the timers that enforce it.
type supervisor struct {
	group    commandGroup
	name     string
	noun     string // "lock", or "lock set"
	grace    time.Duration
	stderr   io.Writer
	valid    time.Time   // the latest valid_until heard of
	watchdog *time.Timer // SIGKILL just before valid
	kill     *time.Timer // SIGKILL after SIGTERM
	lost     bool        // SIGTERM sent: the lock is going or gone

	why       string    // why it is going: the event's reason, or the deadline's
	maxHoldAt time.Time // when the lease ends whatever happens (zero: uncapped)
}

func (s *supervisor) event(e client.Event) {
	switch e.Kind {
	case "renewed":
		s.watch(e.ValidUntil)
	case "expiring", "released", "lost":
		s.stop(e, e.ValidUntil)
	}
}

// watch re-arms the watchdog for a later valid_until.
func (s *supervisor) watch(valid time.Time) {
	if s.lost || !valid.After(s.valid) {
		return
	}
	s.valid = valid
	s.group.deadlines.send(valid)
	if s.watchdog != nil {
		s.watchdog.Stop()
	}
	s.watchdog = time.NewTimer(time.Until(valid.Add(-killLead)))
}

// stop sends SIGTERM once and schedules SIGKILL after the grace period,
// but no later than just before the valid_until that still stands (the
// event's, if it carries one, else the last heard of).
func (s *supervisor) stop(e client.Event, valid time.Time) {
	if s.lost {
		return
	}
	s.lost = true
	if valid.IsZero() || valid.After(s.valid) {
		valid = s.valid
	}
	s.group.deadlines.send(valid)
	what, why := "lost", lostReason(e)
	if e.Kind == "expiring" {
		what, why = "expiring", "renewals keep failing"
	}
	s.why = why
	fmt.Fprintf(s.stderr, "sidelock exec: %s %q %s (%s); stopping the command, valid until %s\n",
		s.noun, s.name, what, why, valid.Format(time.RFC3339Nano))
	s.group.signal(syscall.SIGTERM)
	s.kill = time.NewTimer(min(s.grace, time.Until(valid.Add(-killLead))))
}

// deadlineReason is why the command must be dead by the last valid_until
// heard of: the lease's max_hold when that is what capped it (the words
// `sidelock lock` uses), else renewals that never came.
func (s *supervisor) deadlineReason() string {
	if !s.maxHoldAt.IsZero() && !s.valid.Before(s.maxHoldAt) {
		return "reached its max_hold (" + s.maxHoldAt.Format(time.RFC3339Nano) + ")"
	}
	return "not renewed by its valid_until"
}

func (s *supervisor) killC() <-chan time.Time {
	if s.kill == nil {
		return nil
	}
	return s.kill.C
}

func (s *supervisor) watchdogC() <-chan time.Time {
	if s.watchdog == nil || s.lost {
		return nil
	}
	return s.watchdog.C
}

func (s *supervisor) stopTimers() {
	for _, t := range []*time.Timer{s.watchdog, s.kill} {
		if t != nil {
			t.Stop()
		}
	}
}

// leaseNoun names what exec holds in its messages: a lock set's name
// joins its locks' names with ",".
func leaseNoun(name string) string {
	if strings.Contains(name, ",") {
		return "lock set"
	}
	return "lock"
}

func lostReason(e client.Event) string {
	if e.Reason == "" {
		return "the sidecar connection broke"
	}
	return e.Reason
}

// commandResult passes the command's exit status through: its code, or
// 128+n when a signal n ended it.
func commandResult(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return exitWith(exitCannotRun, "%v", err)
		}
		return nil
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &exitCode{code: 128 + int(ws.Signal())}
	}
	return &exitCode{code: ee.ExitCode()}
}
