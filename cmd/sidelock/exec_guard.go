package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// How `sidelock exec` keeps its promise that the command never runs
// without the lock, however exec ends:
//
//	sidelock exec (holds the lock's connection, watches its events)
//	 └─ sidelock _exec-guard  leader of a new process group G; holds a
//	     │                    duplicate of the lock's connection
//	     └─ COMMAND …         in G, with everything it starts
//
// The sidecar releases the lock when the connection closes, and the
// kernel closes it only when both exec and the guard have closed their
// copies. The guard closes its copy by exiting, and it exits only after
// every other process of G is dead (or a zombie): when the command has
// exited, or at once when exec is gone. So even `kill -9` of exec cannot
// free the lock while the command, or anything it left in G, still runs.
//
// The guard learns of exec's death from PR_SET_PDEATHSIG (Linux; see
// exec_guard_linux.go) and, as a fallback, by polling getppid. exec, for
// its part, sweeps G again after the guard exited, in case the guard was
// killed on its own. What neither can do: stop a process that left G
// (setsid, setpgid), or save the command if exec and the guard are both
// SIGKILLed at once (then the command's direct child dies with the guard,
// through its own PDEATHSIG, but its children live on); a container stop
// kills them all anyway.
//
// The guard keeps the lock's deadline too. exec alone hears the lock's
// events, and a stopped exec (SIGSTOP, a debugger, a frozen cgroup) hears
// nothing: it can neither learn that the lock is lost nor kill the command
// on time, while the sidecar still sees its connection open. So exec sends
// the guard every valid_until it hears, on a pipe (guardDeadlineFD), and the
// guard kills the group killLead before the last one it heard unless a
// later one came: the command is dead by the lock's valid_until whatever
// state exec is in. A stopped exec cannot vouch for renewals either, so the
// command is killed at the last valid_until exec relayed even if the lock
// was renewed since.

// execGuardCommand is the hidden subcommand exec runs the command under:
// `sidelock _exec-guard EXEC_PID -- COMMAND [ARGS...]`.
const execGuardCommand = "_exec-guard"

// guardHoldFD is the guard's copy of the lock's connection: the first of
// exec.Cmd.ExtraFiles; guardDeadlineFD is the read end of the pipe on
// which exec sends each valid_until it hears, the second.
const (
	guardHoldFD     = 3
	guardDeadlineFD = 4
)

// parentDeathSignal is what the kernel sends the guard when exec dies. It
// is one of the forwarded signals, so the guard always has to ask whether
// exec is really gone (getppid) before acting on it.
const parentDeathSignal = syscall.SIGTERM

// parentPollInterval bounds how late the guard notices exec's death if
// the death signal never comes (it was ignored when exec started, or the
// platform has no PDEATHSIG). The lock is not at risk meanwhile: the
// guard still holds the connection.
const parentPollInterval = 100 * time.Millisecond

// forwardedSignals are passed on to the command's process group. exec
// handles them instead of dying of them (SIGQUIT would otherwise dump
// Go's goroutines and exit), so that it ends when the command ends, with
// its status. Left at Go's defaults on purpose: job control (SIGTSTP,
// SIGTTIN, SIGTTOU, SIGCONT: a stopped exec still holds the lock), signals
// Go ignores (SIGPIPE from kill, SIGURG, SIGXCPU, ...), and the ones that
// crash a Go program (SIGABRT, SIGTRAP, SIGSYS, ...): after those, and
// after SIGKILL, the guard kills the command.
func forwardedSignals() []os.Signal {
	return []os.Signal{
		syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGALRM,
	}
}

// notifyForwarded catches the forwarded signals. One that was ignored when
// this process started stays ignored, and so is ignored by the command
// too, which inherits that across exec(2): `nohup sidelock exec ...`
// keeps working.
func notifyForwarded() (<-chan os.Signal, func()) {
	forwarded := forwardedSignals()
	signals := make(chan os.Signal, len(forwarded))
	for _, sig := range forwarded {
		if !signal.Ignored(sig) {
			signal.Notify(signals, sig)
		}
	}
	return signals, func() { signal.Stop(signals) }
}

// guardCommand is the guard process that runs argv for exec: a new
// process group, the lock's connection as its fd 3, the deadlines' pipe as
// its fd 4, the kernel's word when exec dies.
func guardCommand(argv []string, holdConn, deadlines *os.File, env []string, stdout, stderr io.Writer) *exec.Cmd {
	args := append([]string{"sidelock", execGuardCommand, strconv.Itoa(os.Getpid()), "--"}, argv...)
	cmd := &exec.Cmd{Path: selfExecutable(), Args: args, Env: env}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{holdConn, deadlines}
	cmd.SysProcAttr = groupLeaderDyingWithParent(parentDeathSignal)
	return cmd
}

// runExecGuard is the guard: it runs the command in its own process group
// and exits with the command's status once every process of the group is
// dead, or kills them all at once when exec is gone.
func runExecGuard(args []string) error {
	parent, argv, err := parseGuardArgs(args)
	if err != nil {
		return exitWith(exitUsage, "%v", err)
	}
	// Killing "the group" must never mean someone else's group: the guard
	// runs only as the leader exec made it.
	if syscall.Getpgrp() != os.Getpid() {
		return exitWith(exitUsage, "%s is internal to sidelock exec", execGuardCommand)
	}
	// The command must not inherit the lock's connection: a process that
	// escaped the group would keep the lock held for ever.
	syscall.CloseOnExec(guardHoldFD)
	syscall.CloseOnExec(guardDeadlineFD)
	deadlines := readDeadlines(os.NewFile(guardDeadlineFD, "sidelock exec deadlines"))
	signals, stop := notifyForwarded()
	defer stop()
	if os.Getppid() != parent {
		return exitWith(exitLockLost, "sidelock exec ended before the command started")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// In the guard's group; and should the guard itself be killed, the
	// command goes too (exec then sweeps what the command started).
	cmd.SysProcAttr = dyingWithParent(syscall.SIGKILL)
	exited, err := startOnLockedThread(cmd)
	if err != nil {
		return startError(err)
	}
	return guard(parent, signals, exited, deadlines)
}

// parseGuardArgs reads `EXEC_PID -- COMMAND [ARGS...]`.
func parseGuardArgs(args []string) (parent int, argv []string, err error) {
	if len(args) < 3 || args[1] != "--" {
		return 0, nil, fmt.Errorf("%s is internal to sidelock exec", execGuardCommand)
	}
	parent, err = strconv.Atoi(args[0])
	// exec may well be pid 1, a container's entrypoint.
	if err != nil || parent < 1 {
		return 0, nil, fmt.Errorf("%s: bad parent pid %q", execGuardCommand, args[0])
	}
	return parent, args[2:], nil
}

// guard waits for the command, passing its status on, and kills the
// group killLead before the last valid_until exec sent (deadlines) unless
// a later one came. Signals are caught only because the guard is in the
// command's group and must outlive them: they were meant for the command,
// which got them too.
func guard(parent int, signals <-chan os.Signal, exited <-chan error, deadlines <-chan time.Time) error {
	tick := time.NewTicker(parentPollInterval)
	defer tick.Stop()
	var deadline guardDeadline
	defer deadline.stop()
	for {
		select {
		case err := <-exited:
			// Whatever the command left behind dies before the guard
			// closes its copy of the connection: exec may be gone already.
			if sweepSparesCaller {
				sweepGroup(os.Getpid())
			}
			if deadline.passed {
				return exitWith(exitLockLost, "the lock was not renewed by its valid_until %s as far as sidelock exec told (stopped?); killed the command",
					deadline.valid.Format(time.RFC3339Nano))
			}
			return commandResult(err)
		case valid, ok := <-deadlines:
			if !ok {
				deadlines = nil // exec closed the pipe or is gone: the last one stands
				continue
			}
			deadline.set(valid)
		case <-deadline.C():
			deadline.passed = true
			sweepGroup(os.Getpid())
		case <-signals:
		case <-tick.C:
		}
		if os.Getppid() != parent {
			sweepGroup(os.Getpid())
			return exitWith(exitLockLost, "exec (pid %d) is gone; killed the command so that it does not run without the lock", parent)
		}
	}
}

// guardDeadline is the guard's timer: it fires killLead before the last
// valid_until exec sent.
type guardDeadline struct {
	valid  time.Time
	timer  *time.Timer
	passed bool // the timer fired: the group was killed
}

// set re-arms the timer for valid, the latest valid_until exec heard.
func (d *guardDeadline) set(valid time.Time) {
	d.stop()
	d.valid, d.timer = valid, time.NewTimer(time.Until(valid.Add(-killLead)))
}

// C fires when the deadline has come; never before the first set, nor
// once it passed.
func (d *guardDeadline) C() <-chan time.Time {
	if d.timer == nil || d.passed {
		return nil
	}
	return d.timer.C
}

func (d *guardDeadline) stop() {
	if d.timer != nil {
		d.timer.Stop()
	}
}

// readDeadlines delivers the valid_untils exec writes to f, one a line in
// Unix nanoseconds, until f ends; the channel is then closed.
func readDeadlines(f *os.File) <-chan time.Time {
	out := make(chan time.Time)
	go func() {
		defer close(out)
		defer func() { _ = f.Close() }() // read only
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if ns, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
				out <- time.Unix(0, ns)
			}
		}
	}()
	return out
}

// deadlineRelay sends the guard each valid_until exec hears, never
// blocking exec: a guard slow to read gets the latest one, not each.
type deadlineRelay struct {
	w      *os.File
	latest chan time.Time // capacity one: the value not yet written
}

// newDeadlineRelay opens the pipe to the guard, with valid, the first
// valid_until, already in it; the read end is the guard's guardDeadlineFD,
// which exec closes once the guard has started.
func newDeadlineRelay(valid time.Time) (*deadlineRelay, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	if _, err := fmt.Fprintf(w, "%d\n", valid.UnixNano()); err != nil {
		_, _ = r.Close(), w.Close()
		return nil, nil, err
	}
	d := &deadlineRelay{w: w, latest: make(chan time.Time, 1)}
	go d.run()
	return d, r, nil
}

// send relays valid to the guard; a value not yet written is replaced.
// Only exec's supervising goroutine calls it.
func (d *deadlineRelay) send(valid time.Time) {
	select {
	case <-d.latest:
	default:
	}
	d.latest <- valid
}

func (d *deadlineRelay) run() {
	for valid := range d.latest {
		if _, err := fmt.Fprintf(d.w, "%d\n", valid.UnixNano()); err != nil {
			return // the guard is gone
		}
	}
}

// close ends the relay and the guard's pipe.
func (d *deadlineRelay) close() {
	close(d.latest)
	_ = d.w.Close()
}

// startOnLockedThread starts cmd from an OS thread that stays locked,
// and alive, until cmd has exited: the kernel sends PDEATHSIG when the
// thread that forked the child exits, not the process (golang/go#27505).
// The channel delivers cmd.Wait's result.
func startOnLockedThread(cmd *exec.Cmd) (<-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: the thread ends with this goroutine, after the
		// child is gone.
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// startError maps a command that could not be started to 127 (not found)
// or 126 (not runnable), as shells do.
func startError(err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitWith(exitNotFound, "%v", err)
	}
	return exitWith(exitCannotRun, "%v", err)
}

// dupForChild duplicates conn's descriptor for a child process to
// inherit. Unlike net.TCPConn.File, the copy is left non-blocking, which
// the connection's description (shared with the copy) must stay for the
// runtime poller that reads the lock's events.
func dupForChild(conn net.Conn) (*os.File, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("the connection to the sidecar (%T) has no descriptor to share", conn)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var dup int
	var dupErr error
	err = raw.Control(func(fd uintptr) {
		// Under ForkLock, no child forked meanwhile inherits the copy
		// before it is marked close-on-exec.
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		if dup, dupErr = syscall.Dup(int(fd)); dupErr == nil {
			syscall.CloseOnExec(dup)
		}
	})
	if err = errors.Join(err, dupErr); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(dup), "sidelock lock connection"), nil
}
