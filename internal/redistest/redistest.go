// Package redistest starts real redis-server processes for tests, each on a
// loopback address of its own (a random 127.x.y.z) and a port outside the
// kernel's ephemeral range. It is imported only from _test files:
// sidelock's behaviour under failures (killed, frozen or restarted masters)
// is only worth testing against the real server, never against a mock.
//
// Why an address of its own: Restart must bring a killed master back on
// the same address and port, and between the kill and the restart the
// port is free. On the shared 127.0.0.1, another process (go test ./...
// runs packages in parallel) could take it in between: a listener asking
// the kernel for any port, or any outgoing connection's local port. No
// other process binds a random 127.x.y.z, and the kernel never hands out
// a port outside its ephemeral range on its own, so the gap is safe.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
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

// NodeTimeout is how long a test lets one call to a master started here
// take (redlock.Config.NodeTimeout; a sidecar run by internal/sidecartest
// gets it as SIDELOCK_NODE_TIMEOUT) when what it checks is not how fast
// masters answer: the shipped 50ms is for a master on a host of its own,
// while these share two cores with the test, the sidecar, other test
// packages and, in CI, other work, and a master kept from the CPU that
// long tests the machine, not the product. It is a tenth of the default
// SIDELOCK_KEY_TTL, the most that setting allows (TestNodeTimeoutFitsTheDefaultKeyTTL
// in internal/sidecartest keeps it so).
// Tests of what the shipped timing promises (a burst answered 429, a
// starved sidecar) set 50ms themselves.
const NodeTimeout = time.Second

// nodeTimeoutsPerKeyTTL: a node timeout may be at most a tenth of the key
// ttl (SIDELOCK_NODE_TIMEOUT's rule in internal/config), so that renewals,
// every third of the key ttl, fit.
const nodeTimeoutsPerKeyTTL = 10

// NodeTimeoutFor is NodeTimeout for a test that puts keyTTL on the masters:
// at most a tenth of it, as a sidecar's settings require.
func NodeTimeoutFor(keyTTL time.Duration) time.Duration {
	return min(NodeTimeout, keyTTL/nodeTimeoutsPerKeyTTL)
}

const (
	// readyTimeout bounds how long a server may take to answer PING. Redis
	// starts in milliseconds; the slack is for busy CI machines running -race.
	readyTimeout = 5 * time.Second

	// startAttempts is how many free ports Start tries: another process can
	// grab the port between our probe and redis-server's bind.
	startAttempts = 5

	// restartAttempts is how many times Restart retries binding its fixed
	// address, which a dying predecessor or a stray client may still hold;
	// restartTimeout bounds all of them together, so a Restart that cannot
	// succeed fails the test clearly instead of hanging it.
	restartAttempts = 20
	restartBackoff  = 50 * time.Millisecond
	restartTimeout  = 3 * readyTimeout

	// portProbes is how many random ports pickPort tries on one address.
	portProbes = 50

	// defaultHost is the shared loopback address: used only when asked
	// (WithHost), with WithTLS, or where 127.x.y.z cannot be bound.
	defaultHost = "127.0.0.1"

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
	// host is the address to bind (WithHost); empty for one of its own.
	host string
}

// WithHost binds the server to host (an IP address such as "127.0.0.1")
// instead of a random loopback address of its own: for tests that need a
// name known in advance, such as a certificate's IP address or a
// "localhost:port" alias of the server. A shared address gives up part of
// the protection against another process taking the port while the server
// is down between Kill and Restart (the port stays outside the kernel's
// ephemeral range).
func WithHost(host string) Option {
	return func(c *config) { c.host = host }
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
// redis-server's --tls-auth-clients. The plain port stays open. Because
// test certificates name 127.0.0.1 (or localhost), and the address must be
// known before the certificate is written, a TLS server binds 127.0.0.1
// unless WithHost says otherwise.
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
	host    string // the loopback address it binds; fixed for its life
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

// Start runs a redis-server on a loopback address of its own (a random
// 127.x.y.z; see WithHost and WithTLS) and a free port outside the
// ephemeral range, with persistence off and its working directory in
// t.TempDir, waits until it answers PING, and kills it when the test ends.
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
		if s.host, s.port, s.tlsPort, err = pickAddress(cfg.host, cfg.tlsArgs != nil); err != nil {
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

// Addr is the server's "127.x.y.z:port" (a loopback address); it stays the
// same across Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort(s.host, strconv.Itoa(s.port))
}

// TLSAddr is the TLS port's "host:port" (127.0.0.1 unless WithHost); empty
// without WithTLS.
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort(s.host, strconv.Itoa(s.tlsPort))
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
// address, port and directory, waiting until it answers PING. Keys survive
// only with WithAppendOnly; otherwise the master comes back empty, as
// Redlock's "restart without persistence" case requires. A bind that fails
// (the predecessor's socket, a stray listener) is retried for a bounded
// time; then the test fails. Call it from the test's goroutine only, as
// any t.Fatal; other goroutines use TryRestart.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.TryRestart(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// TryRestart is Restart that returns its error instead of failing the test:
// for goroutines other than the test's, which must not call t.Fatal. Report
// the error (t.Error) before the test returns.
func (s *Server) TryRestart() error {
	s.Kill()
	deadline := time.Now().Add(restartTimeout)
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := s.launch()
		if err == nil {
			return nil
		}
		if attempt >= restartAttempts || time.Now().After(deadline) {
			return fmt.Errorf("restarting redis-server on %s (same address and port) failed %d times in %v%s: %w\nlog tail:\n%s",
				s.Addr(), attempt, time.Since(start).Round(time.Millisecond), s.bindHint(), err, s.logTail())
		}
		time.Sleep(restartBackoff)
	}
}

// bindHint says whether the address is taken by another socket right now.
func (s *Server) bindHint() string {
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return " (another socket holds the address)"
		}
		return fmt.Sprintf(" (%v)", err)
	}
	_ = l.Close()
	return ""
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
		"--bind", s.host,
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

// pickAddress chooses the address a new server binds: host when set, else
// 127.0.0.1 for TLS, else a random 127.x.y.z of its own; and on it a free
// port (and a second one for TLS). Where 127.x.y.z cannot be bound (only
// 127.0.0.1 is configured, as on macOS by default) it falls back to
// 127.0.0.1.
func pickAddress(host string, tls bool) (string, int, int, error) {
	switch {
	case host != "":
	case tls:
		host = defaultHost
	default:
		host = randomLoopback()
	}
	plain, err := pickPort(host, 0)
	if errors.Is(err, syscall.EADDRNOTAVAIL) && host != defaultHost {
		host = defaultHost
		plain, err = pickPort(host, 0)
	}
	if err != nil || !tls {
		return host, plain, 0, err
	}
	tlsPort, err := pickPort(host, plain)
	return host, plain, tlsPort, err
}

// randomLoopback is a random 127.x.y.z other than 127.0.0.1, never ending
// in .0 or .255.
func randomLoopback() string {
	for {
		a, b, c := rand.IntN(256), rand.IntN(256), 1+rand.IntN(254)
		if a != 0 || b != 0 || c != 1 {
			return fmt.Sprintf("127.%d.%d.%d", a, b, c)
		}
	}
}

// pickPort finds a port free on host, other than not, by binding it. It
// tries random ports outside the kernel's ephemeral range first: the
// kernel never gives those out by itself (to a listener on port 0, or to
// an outgoing connection), so no other process lands on it by chance. The
// port is free only until someone else binds it, which is why Start
// retries.
func pickPort(host string, not int) (int, error) {
	lo, hi := quietPorts()
	var err error
	for range portProbes {
		if hi <= lo {
			break
		}
		port := lo + rand.IntN(hi-lo+1)
		if port == not {
			continue
		}
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port))); err == nil {
			_ = l.Close()
			return port, nil
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return 0, err
		}
	}
	// No quiet range, or every probe was taken: any port the kernel picks.
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// quietPorts is the range pickPort draws from: below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range, 32768–60999 by default on
// Linux), or above it when too little room is left below.
var quietPorts = sync.OnceValues(func() (lo, hi int) {
	const floor, room = 10000, 1000
	ephLo, ephHi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			l, err1 := strconv.Atoi(f[0])
			h, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil && l <= h {
				ephLo, ephHi = l, h
			}
		}
	}
	switch {
	case ephLo-1-floor >= room:
		return floor, ephLo - 1
	case 65535-(ephHi+1) >= room:
		return ephHi + 1, 65535
	}
	return 0, 0 // the kernel hands out nearly every port: no quiet range
})

// waitReady polls until the server answers PING. A server that requires a
// password answers NOAUTH, which proves it is serving just as well. It gives
// up as soon as the process exits, typically because the port was taken,
// and a PING answered after that came from whatever holds the address, not
// from this server.
func waitReady(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	lastErr := errors.New("no attempt made")
	gone := func() error {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited before answering PING on %s (last probe: %w)", addr, lastErr)
		default:
			return nil
		}
	}
	for time.Now().Before(deadline) {
		if err := gone(); err != nil {
			return err
		}
		if lastErr = ping(addr, exited); lastErr == nil {
			return gone()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s did not answer PING within %s: %w", addr, readyTimeout, lastErr)
}

// ping sends one PING; it gives up at once when exited closes, rather
// than wait out its deadline on a socket that will never answer.
func ping(addr string, exited <-chan struct{}) error {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	var watch sync.WaitGroup
	stop := make(chan struct{})
	defer watch.Wait() // runs last: the watcher ends before ping returns
	defer close(stop)
	defer conn.Close()
	watch.Go(func() {
		select {
		case <-exited:
			_ = conn.Close()
		case <-stop:
		}
	})
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
