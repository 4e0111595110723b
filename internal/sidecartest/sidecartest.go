// Package sidecartest runs the sidelock binary in tests: build it (Build),
// start it on free loopback ports with the environment a test gives, wait
// until it answers, keep its log, stop it with SIGTERM or kill it, and
// leave nothing running after the test (t.Cleanup). The masters come from
// internal/redistest; what a harness measures or checks stays in the
// harness. It is imported only from _test files, from this module and the
// modules nested in it (tools, test/spec, test/deploy, test/container).
//
// Timing suited to a shared machine: unless the environment a test gives
// sets SIDELOCK_NODE_TIMEOUT, the sidecar gets redistest.NodeTimeout, or a
// tenth of the test's SIDELOCK_KEY_TTL when that is less (see TestEnv). A
// test that judges the shipped timing sets the node timeout itself.
package sidecartest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
)

const (
	// DefaultReadyPath is the admin endpoint Launch waits for unless
	// Options say otherwise.
	DefaultReadyPath = "/readyz"
	// DefaultReadyWithin bounds that wait: generous, the machine's cores
	// are shared with other test packages.
	DefaultReadyWithin = 20 * time.Second

	// portAttempts bounds a first launch's retries: a port FreeAddr found
	// free can be taken (by a redis-server of another test package, or an
	// outgoing connection) before the sidecar binds it.
	portAttempts = 5
	portTaken    = "address already in use"

	// loopback is where the sidecar listens, as in a pod.
	loopback = "127.0.0.1"

	// pollEvery is the pause between two probes of WaitOK; probeTimeout
	// gives up on a port that accepts and never answers (another program
	// may have taken it).
	pollEvery    = 20 * time.Millisecond
	probeTimeout = time.Second

	// logTailBytes is how much of the log LogTail shows in an error;
	// failureLogBytes, how much a failed test's log gets.
	logTailBytes    = 4 << 10
	failureLogBytes = 64 << 10
)

// ErrExited is WaitOK's answer when the process ended before it answered.
var ErrExited = errors.New("exited before it answered 200")

// ErrNoExit wraps Stop's answer when the process outlived its SIGTERM.
var ErrNoExit = errors.New("no exit")

// Options say how to run the binary and when it counts as started.
type Options struct {
	// Args are the binary's arguments; none runs the sidecar.
	Args []string
	// ReadyPath is the admin endpoint that must answer 200 before Launch
	// returns: DefaultReadyPath when empty, or "/healthz" for a sidecar
	// whose masters may not count yet.
	ReadyPath string
	// ReadyWithin bounds the wait; DefaultReadyWithin when zero.
	ReadyWithin time.Duration
	// ReadyPoll is the pause between two probes of that wait (20ms when
	// zero): a benchmark that times the start to ready polls finer.
	ReadyPoll time.Duration
}

// Process is one sidelock process under test, started again on the same
// addresses by each later Launch (a restart), its log appended to.
type Process struct {
	t       testing.TB
	bin     string
	opts    Options
	logPath string
	// apiAddr and adminAddr are "127.0.0.1:port", set by the first Launch.
	apiAddr, adminAddr string

	mu  sync.Mutex
	run *incarnation // the latest start; nil before the first
}

// incarnation is one start of the process.
type incarnation struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once Wait returned
	err    error         // Wait's answer, set before exited is closed
}

// New prepares bin to run (Launch starts it) and kills it, whatever its
// state, when the test ends; a failed test gets the end of its log.
func New(t testing.TB, bin string, opts Options) *Process {
	t.Helper()
	p := &Process{t: t, bin: bin, opts: opts, logPath: filepath.Join(t.TempDir(), "sidelock.log")}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() && p.apiAddr != "" {
			t.Logf("sidelock %s log (the last %d KiB at most):\n%s", p.API(), failureLogBytes>>10, p.tail(failureLogBytes))
		}
	})
	return p
}

// Start runs bin with env (see Launch) and fails the test unless it answers
// in time.
func Start(t testing.TB, bin string, env []string, opts Options) *Process {
	t.Helper()
	p := New(t, bin, opts)
	if err := p.Launch(env); err != nil {
		t.Fatal(err)
	}
	return p
}

// Launch starts the process with env, its whole environment, plus the
// test timing (TestEnv) and SIDELOCK_LISTEN_ADDR and SIDELOCK_ADMIN_ADDR
// last (so that no variable of env moves a listener off its port), and
// waits until its ReadyPath
// answers 200. The first Launch picks free ports, again when the sidecar
// finds one taken; later ones keep them, so clients reconnect to the same
// place. On failure the process is killed and the error ends with the log's
// tail. It may run on any goroutine.
func (p *Process) Launch(env []string) error {
	if p.apiAddr != "" {
		return p.launchOnce(env, os.O_APPEND)
	}
	for attempt := 1; ; attempt++ {
		api, admin, err := freeAddrPairOn(loopback)
		if err != nil {
			return err
		}
		p.apiAddr, p.adminAddr = api, admin
		err = p.launchOnce(env, os.O_TRUNC) // judge this attempt by its own log
		if err == nil || attempt == portAttempts || !strings.Contains(p.Log(), portTaken) {
			return err
		}
		p.t.Logf("a listener's port was taken before the sidecar bound it; new ports")
	}
}

// launchOnce starts one incarnation on the chosen addresses and waits
// until it answers.
func (p *Process) launchOnce(env []string, logMode int) error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|logMode, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.opts.Args...)
	cmd.Env = append(TestEnv(env), "SIDELOCK_LISTEN_ADDR="+p.apiAddr, "SIDELOCK_ADMIN_ADDR="+p.adminAddr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return err
	}
	run := &incarnation{cmd: cmd, exited: make(chan struct{})}
	go func() { run.err = cmd.Wait(); _ = logFile.Close(); close(run.exited) }()
	p.mu.Lock()
	p.run = run
	p.mu.Unlock()
	if err := p.waitReady(run); err != nil {
		p.Kill() // not left running behind the next attempt
		return fmt.Errorf("sidelock %s: %w:\n%s", p.API(), err, p.LogTail())
	}
	return nil
}

func (p *Process) waitReady(run *incarnation) error {
	within := cmp.Or(p.opts.ReadyWithin, DefaultReadyWithin)
	path := cmp.Or(p.opts.ReadyPath, DefaultReadyPath)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := waitOK(ctx, p.Admin()+path, run.exited, cmp.Or(p.opts.ReadyPoll, pollEvery)); err != nil {
		if errors.Is(err, ErrExited) {
			return fmt.Errorf("exited at start (%w)", run.err)
		}
		return fmt.Errorf("%s not 200 within %v", path, within)
	}
	return nil
}

const (
	envNodeTimeout = "SIDELOCK_NODE_TIMEOUT"
	envKeyTTL      = "SIDELOCK_KEY_TTL"
)

// TestEnv is env with the node timeout a test on a shared machine needs
// (redistest.NodeTimeout, or NodeTimeoutFor env's SIDELOCK_KEY_TTL) added
// unless env sets SIDELOCK_NODE_TIMEOUT: a sidecar whose masters share the
// machine's two cores with the test and other test packages must not take
// a master kept from the CPU for 50ms for a failed one. Launch applies it;
// a harness that runs the binary itself calls it.
func TestEnv(env []string) []string {
	timeout := redistest.NodeTimeout
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		switch name {
		case envNodeTimeout:
			return slices.Clip(env)
		case envKeyTTL:
			if ttl, err := time.ParseDuration(value); err == nil {
				timeout = redistest.NodeTimeoutFor(ttl)
			}
		}
	}
	return append(slices.Clip(env), envNodeTimeout+"="+timeout.String())
}

// WaitOK polls GET url until it answers 200 (nil), the process whose
// exited channel is given ends first (ErrExited; a nil channel never
// does), or ctx ends (its error). Each probe opens a fresh connection and
// gives up after probeTimeout, as the kubelet's probes do.
func WaitOK(ctx context.Context, url string, exited <-chan struct{}) error {
	return waitOK(ctx, url, exited, pollEvery)
}

func waitOK(ctx context.Context, url string, exited <-chan struct{}, every time.Duration) error {
	client := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		if statusOf(ctx, client, url) == http.StatusOK {
			return nil
		}
		select {
		case <-exited:
			return ErrExited
		default:
		}
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return fmt.Errorf("GET %s: no 200: %w", url, ctx.Err())
		case <-time.After(every):
		}
	}
}

// statusOf is the status of GET url, 0 when there is none.
func statusOf(ctx context.Context, client *http.Client, url string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0
	}
	res, err := client.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// FreeAddr is a "127.0.0.1:port" nobody listened on a moment ago: the
// kernel's pick for a listener closed at once. Another process may take
// it before the caller binds it; Launch retries for that.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return FreeAddrOn(t, loopback)
}

// FreeAddrOn is FreeAddr on another loopback address, such as a random
// 127.x.y.z that no other process binds.
func FreeAddrOn(t testing.TB, host string) string {
	t.Helper()
	addr, err := freeAddrOn(host)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// freeAddrPairOn is two distinct free addresses: both listeners are open at
// once, so the kernel cannot hand out one port twice (picked one after the
// other, the API and the admin listener got the same port now and then,
// which the sidecar refuses at start).
func freeAddrPairOn(host string) (string, string, error) {
	first, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", "", err
	}
	defer func() { _ = first.Close() }()
	second, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", "", err
	}
	defer func() { _ = second.Close() }()
	return first.Addr().String(), second.Addr().String(), nil
}

func freeAddrOn(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// APIAddr is the lock API's "127.0.0.1:port" (empty before Launch).
func (p *Process) APIAddr() string { return p.apiAddr }

// AdminAddr is the admin listener's "127.0.0.1:port".
func (p *Process) AdminAddr() string { return p.adminAddr }

// API is the lock API's URL, "http://127.0.0.1:port".
func (p *Process) API() string { return "http://" + p.apiAddr }

// Admin is the admin listener's URL (/healthz, /readyz, /metrics).
func (p *Process) Admin() string { return "http://" + p.adminAddr }

// current is the latest incarnation, nil before the first Launch.
func (p *Process) current() *incarnation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.run
}

// Running reports whether the latest incarnation has not exited.
func (p *Process) Running() bool {
	run := p.current()
	if run == nil {
		return false
	}
	select {
	case <-run.exited:
		return false
	default:
		return true
	}
}

// Pid is the latest incarnation's process id (0 before Launch).
func (p *Process) Pid() int {
	if run := p.current(); run != nil {
		return run.cmd.Process.Pid
	}
	return 0
}

// Signal sends sig to the latest incarnation.
func (p *Process) Signal(sig os.Signal) error {
	run := p.current()
	if run == nil {
		return errors.New("sidelock was never launched")
	}
	return run.cmd.Process.Signal(sig)
}

// Stop is SIGTERM, the graceful shutdown Kubernetes starts with, then
// waiting up to within for the exit: nil for exit status 0, Wait's error
// for another end, and an error wrapping ErrNoExit when the process was
// still running after within (it is killed then). Stopping a process that
// already ended answers how it ended.
func (p *Process) Stop(within time.Duration) error {
	run := p.current()
	if run == nil {
		return errors.New("sidelock was never launched")
	}
	_ = run.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-run.exited:
		return run.err
	case <-time.After(within):
		p.Kill()
		return fmt.Errorf("%w within %v of SIGTERM: killed", ErrNoExit, within)
	}
}

// Kill is kill -9, then waiting for the exit, so nothing outlives the
// call; the process's locks stay on the masters until their keys lapse.
// It does nothing to a process that has ended or never started.
func (p *Process) Kill() {
	run := p.current()
	if run == nil {
		return
	}
	select {
	case <-run.exited:
		return
	default:
	}
	_ = run.cmd.Process.Signal(syscall.SIGCONT) // resume one stopped with SIGSTOP
	_ = run.cmd.Process.Kill()
	<-run.exited
}

// Log is everything the process printed (stdout and stderr), across
// restarts.
func (p *Process) Log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// LogTail is the log's last 4 KiB, for an error message.
func (p *Process) LogTail() string { return p.tail(logTailBytes) }

func (p *Process) tail(n int) string {
	log := p.Log()
	if len(log) > n {
		log = log[len(log)-n:]
	}
	return log
}
