// Package redistest starts real redis-server processes on free loopback ports
// for tests. It is imported only from _test files: sidelock's behaviour under
// failures (killed, frozen or restarted masters) is only worth testing
// against the real server, never against a mock.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// readyTimeout bounds how long a server may take to answer PING. Redis
	// starts in milliseconds; the slack is for busy CI machines running -race.
	readyTimeout = 5 * time.Second

	// startAttempts is how many free ports Start tries: another process can
	// grab the port between our probe and redis-server's bind.
	startAttempts = 5

	// restartAttempts is how many times Restart retries binding its fixed
	// port, which a dying predecessor or a stray client may still hold.
	restartAttempts = 20

	// logTail is how much of the server log a failure report shows.
	logTail = 4 << 10

	skipEnv = "SIDELOCK_SKIP_REDIS"
)

// Option adjusts the redis-server command line.
type Option func(*config)

type config struct {
	args []string
	// durable data goes to memory-backed storage when the machine has it:
	// an fsync per write on a slow virtual disk can outlast the lock
	// algorithm's 50ms node timeout and turn a test into a timing lottery.
	memoryDir bool
	// tlsArgs, when set, opens a TLS port next to the plain one; Start
	// picks it with the plain port, so a taken one is retried as well.
	tlsArgs []string
}

// WithAppendOnly turns on the append-only file with an fsync per write, so
// data survives Kill followed by Restart.
func WithAppendOnly() Option {
	return func(c *config) {
		c.args = append(c.args, "--appendonly", "yes", "--appendfsync", "always")
		c.memoryDir = true
	}
}

// WithArgs appends raw redis-server arguments such as "--requirepass", "pw".
// They come after the defaults, so they override them.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithTLS opens a TLS port (see TLSAddr) serving certFile/keyFile and
// trusting client certificates signed by caFile; requireClientCert is
// redis-server's --tls-auth-clients. The plain port stays open.
func WithTLS(certFile, keyFile, caFile string, requireClientCert bool) Option {
	auth := "no"
	if requireClientCert {
		auth = "yes"
	}
	return func(c *config) {
		c.tlsArgs = []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile,
			"--tls-ca-cert-file", caFile, "--tls-auth-clients", auth}
	}
}

// Server is one running (or deliberately killed or frozen) redis-server.
type Server struct {
	binary  string
	port    int
	tlsPort int // 0 without WithTLS
	dir     string
	args    []string
	tlsArgs []string

	mu   sync.Mutex
	proc *process
}

// process is one incarnation of the server; Restart replaces it.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait returns
}

// Start runs a redis-server on a free 127.0.0.1 port with persistence off
// and its working directory in t.TempDir, waits until it answers PING, and
// kills it when the test ends.
//
// A missing redis-server binary fails the test, because silently skipping
// would hide that the interesting tests never ran; set SIDELOCK_SKIP_REDIS=1
// to skip instead.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	binary := lookupBinary(t)
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	s := &Server{binary: binary, dir: dataDir(t, cfg.memoryDir), args: cfg.args, tlsArgs: cfg.tlsArgs}
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("redis-server %s log tail:\n%s", s.Addr(), s.logTail())
		}
	})

	var err error
	for range startAttempts {
		if s.port, s.tlsPort, err = s.freePorts(); err != nil {
			continue
		}
		if err = s.launch(); err == nil {
			return s
		}
	}
	t.Fatalf("redistest: starting redis-server: %v\nlog tail:\n%s", err, s.logTail())
	return nil
}

// StartN starts n independent servers, as a Redlock deployment uses.
func StartN(t testing.TB, n int, opts ...Option) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t, opts...)
	}
	return servers
}

// Addr is the server's "127.0.0.1:port"; it stays the same across Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// TLSAddr is the TLS port's "127.0.0.1:port"; empty without WithTLS.
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// freePorts picks the plain port and, with WithTLS, the TLS port.
func (s *Server) freePorts() (plain, tls int, err error) {
	if plain, err = freePort(); err != nil || s.tlsArgs == nil {
		return plain, 0, err
	}
	tls, err = freePort()
	return plain, tls, err
}

// Pid is the current process id, or 0 before the first successful start.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Kill sends SIGKILL, simulating a crashed master, and waits for the process
// to exit. Killing an already dead server is a no-op.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL) // fails only if it already exited
	<-p.exited
}

// Stop freezes the server with SIGSTOP: connections stay open but nothing
// answers, like a master behind a network partition or in a long GC-like
// pause. Clients must time out on their own.
func (s *Server) Stop() { s.signal(syscall.SIGSTOP) }

// Cont resumes a server frozen by Stop.
func (s *Server) Cont() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		_ = s.proc.cmd.Process.Signal(sig)
	}
}

// Restart kills the server if it still runs and starts it again on the same
// port and directory, waiting until it answers PING. Keys survive only with
// WithAppendOnly; otherwise the master comes back empty, as Redlock's
// "restart without persistence" case requires.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	var err error
	for range restartAttempts {
		if err = s.launch(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redistest: restarting redis-server on %s: %v\nlog tail:\n%s", s.Addr(), err, s.logTail())
}

// launch starts one incarnation and waits until it answers PING.
func (s *Server) launch() error {
	cmd := exec.Command(s.binary, s.commandLine()...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = dieWithParent()
	// redis-server writes to its log file; nothing goes to the test's output.
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()

	if err := waitReady(s.Addr(), p.exited); err != nil {
		s.Kill()
		return err
	}
	return nil
}

func (s *Server) commandLine() []string {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--protected-mode", "no",
		"--logfile", s.logPath(),
	}
	if s.tlsPort != 0 {
		args = append(append(args, "--tls-port", strconv.Itoa(s.tlsPort)), s.tlsArgs...)
	}
	return append(args, s.args...)
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

func (s *Server) logTail() string {
	data, err := os.ReadFile(s.logPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(data) > logTail {
		data = data[len(data)-logTail:]
	}
	return string(data)
}

func lookupBinary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	if os.Getenv(skipEnv) == "1" {
		t.Skipf("redis-server not found and %s=1: skipping", skipEnv)
	}
	t.Fatal("redis-server not found: run `make test` (installs it) or apt-get install redis-server")
	return ""
}

// freePort asks the kernel for an unused loopback port. The port is free
// only until someone else binds it, which is why Start retries.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls until the server answers PING. A server that requires a
// password answers NOAUTH, which proves it is serving just as well. It gives
// up early when the process exits, typically because the port was taken.
func waitReady(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	lastErr := errors.New("no attempt made")
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited before answering PING on %s (last probe: %w)", addr, lastErr)
		default:
		}
		if lastErr = ping(addr); lastErr == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s did not answer PING within %s: %w", addr, readyTimeout, lastErr)
}

func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
		return nil
	}
	return fmt.Errorf("unexpected PING reply %q", strings.TrimSpace(line)) // e.g. -LOADING
}

// dataDir is the server's working directory: in /dev/shm when asked and
// available (removed at cleanup), else in t.TempDir.
func dataDir(t testing.TB, memory bool) string {
	if memory {
		if dir, err := os.MkdirTemp("/dev/shm", "sidelock-redis-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// ParseClientList splits the reply of CLIENT LIST into one map of fields
// (id, name, flags, sub, ...) per connection, for tests that count a
// client's connections on a server.
func ParseClientList(list string) []map[string]string {
	var clients []map[string]string
	for line := range strings.Lines(list) {
		fields := map[string]string{}
		for f := range strings.FieldsSeq(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		if len(fields) > 0 {
			clients = append(clients, fields)
		}
	}
	return clients
}

// CommandCalls reads how often a command ran ("ping", "client|setname")
// from the reply of INFO commandstats; 0 when it never ran.
func CommandCalls(commandstats, command string) int {
	for line := range strings.Lines(commandstats) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":calls=")
		if ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}
