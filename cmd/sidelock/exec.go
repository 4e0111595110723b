package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// Exit codes of `sidelock exec`, besides the command's own code. They
// follow sysexits(3) where one fits, so scripts can tell them apart.
const (
	exitUsage       = 64  // bad flags or arguments
	exitUnavailable = 69  // the sidecar could not be reached or refused the request
	exitNotAcquired = 75  // the lock was not acquired within --wait (EX_TEMPFAIL: try later)
	exitLockLost    = 79  // the lock was lost while the command ran; the command was stopped
	exitCannotRun   = 126 // the command exists but could not be started
	exitNotFound    = 127 // the command was not found
)

// exitCode asks main to exit with code, after printing err if any.
type exitCode struct {
	code int
	err  error
}

func (e *exitCode) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitCode) Unwrap() error { return e.err }

func exitWith(code int, format string, args ...any) error {
	return &exitCode{code: code, err: fmt.Errorf(format, args...)}
}

// execOptions are the flags of `sidelock exec`.
type execOptions struct {
	opts  client.Options
	grace time.Duration
	name  string
	argv  []string
}

func parseExec(args []string, stderr io.Writer) (execOptions, error) {
	var o execOptions
	fs := flag.NewFlagSet("sidelock exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.opts.Wait, "wait", 0, "how long to wait for the lock (0: try once)")
	fs.DurationVar(&o.opts.TTL, "ttl", 0, "bound on the keys' ttl on the masters (default: the sidecar's)")
	fs.DurationVar(&o.opts.MaxHold, "max-hold", 0, "end the hold (and stop the command) after this long")
	fs.StringVar(&o.opts.Owner, "owner", "", "label shown to anyone who inspects the lock (default: the hostname)")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "after SIGTERM on an expiring or lost lock, wait at most this long before SIGKILL (never past the lock's valid_until)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sidelock exec [flags] NAME -- COMMAND [ARGS...]\n\n"+
			"Runs COMMAND while holding the lock NAME through the local sidecar ($SIDELOCK_ADDR,\n"+
			"default %s; $SIDELOCK_API_TOKEN if the sidecar requires one). Exit codes: the command's own; %d lock not acquired within --wait;\n"+
			"%d lock lost (command stopped); %d sidecar unreachable; %d usage; %d/%d command not runnable/found.\n\nflags:\n",
			client.DefaultAddr, exitNotAcquired, exitLockLost, exitUnavailable, exitUsage, exitCannotRun, exitNotFound)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, &exitCode{code: exitUsage, err: err}
	}
	rest := fs.Args()
	if len(rest) < 3 || rest[1] != "--" {
		fs.Usage()
		return o, exitWith(exitUsage, "exec needs NAME -- COMMAND [ARGS...]")
	}
	o.name, o.argv = rest[0], rest[2:]
	if o.opts.Owner == "" {
		o.opts.Owner, _ = os.Hostname()
	}
	return o, nil
}

// runExec holds the lock for as long as the command runs.
func runExec(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseExec(args, stderr)
	if err != nil {
		return err
	}
	addr := getenv("SIDELOCK_ADDR")
	if addr == "" {
		addr = client.DefaultAddr
	}
	held, err := client.New(addr, nil).WithToken(getenv("SIDELOCK_API_TOKEN")).Hold(ctx, o.name, o.opts)
	switch {
	case errors.Is(err, client.ErrLockHeld):
		return exitWith(exitNotAcquired, "lock %q not acquired within %v", o.name, o.opts.Wait)
	case err != nil:
		return exitWith(exitUnavailable, "sidecar at %s: %w", addr, err)
	}
	defer held.Release()
	cmd := exec.Command(o.argv[0], o.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// Its own process group, so that stopping the command stops what it
	// started too: a shell's children must not outlive the lock.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(),
		"SIDELOCK_LOCK_NAME="+held.Lease.Name,
		"SIDELOCK_TOKEN="+held.Lease.Token,
		"SIDELOCK_FENCE="+strconv.FormatInt(held.Lease.Fence, 10))
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitWith(exitNotFound, "%v", err)
		}
		return exitWith(exitCannotRun, "%v", err)
	}
	return superviseCommand(cmd, held, o.grace, stderr)
}

// killLead is how long before valid_until the command is SIGKILLed at the
// latest, so that it is dead, not dying, when the promise runs out.
const killLead = 100 * time.Millisecond

// superviseCommand forwards SIGINT and SIGTERM to the command and makes
// sure it is dead by the lock's valid_until unless the lock is renewed:
//   - an "expiring" or "lost" event sends SIGTERM at once, and SIGKILL after
//     the grace period or just before valid_until, whichever is first;
//   - a watchdog SIGKILLs the command just before the last valid_until it
//     heard of, should the stream stall without saying anything.
func superviseCommand(cmd *exec.Cmd, held *client.Held, grace time.Duration, stderr io.Writer) error {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s := supervisor{cmd: cmd, name: held.Lease.Name, grace: grace, stderr: stderr}
	s.watch(held.Lease.ValidUntil)
	defer s.stopTimers()
	events := held.Events()
	for {
		select {
		case sig := <-signals:
			signalGroup(cmd, sig.(syscall.Signal))
		case e, ok := <-events:
			if !ok {
				events = nil
				s.stop(held.End(), time.Time{})
				continue
			}
			s.event(e)
		case <-s.killC():
			signalGroup(cmd, syscall.SIGKILL)
		case <-s.watchdogC():
			fmt.Fprintf(stderr, "sidelock exec: lock %q not renewed by its valid_until; killing the command\n", s.name)
			s.lost = true
			signalGroup(cmd, syscall.SIGKILL)
		case err := <-exited:
			if s.lost {
				return exitWith(exitLockLost, "lock %q was lost while the command ran", s.name)
			}
			return commandResult(err)
		}
	}
}

// supervisor is superviseCommand's state: the deadline the command must be
// dead by, and the timers that enforce it.
type supervisor struct {
	cmd      *exec.Cmd
	name     string
	grace    time.Duration
	stderr   io.Writer
	valid    time.Time   // the latest valid_until heard of
	watchdog *time.Timer // SIGKILL just before valid
	kill     *time.Timer // SIGKILL after SIGTERM
	lost     bool        // SIGTERM sent: the lock is going or gone
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
	what, why := "lost", lostReason(e)
	if e.Kind == "expiring" {
		what, why = "expiring", "renewals keep failing"
	}
	fmt.Fprintf(s.stderr, "sidelock exec: lock %q %s (%s); stopping the command, valid until %s\n",
		s.name, what, why, valid.Format(time.RFC3339Nano))
	signalGroup(s.cmd, syscall.SIGTERM)
	s.kill = time.NewTimer(min(s.grace, time.Until(valid.Add(-killLead))))
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

// signalGroup signals the command's process group (see runExec).
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	_ = syscall.Kill(-cmd.Process.Pid, sig)
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
