//go:build linux

package chaos

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// sidelockBinary is the sidecar under test, built once by TestMain.
var sidelockBinary string

func TestMain(m *testing.M) {
	if url := os.Getenv(holderEnv); url != "" {
		os.Exit(runHolderProcess(url))
	}
	if mode() == "" {
		os.Exit(m.Run()) // every test skips: nothing to build
	}
	dir, err := os.MkdirTemp("", "sidelock-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sidelockBinary = filepath.Join(dir, "sidelock")
	if err := buildSidelock(sidelockBinary); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildSidelock compiles cmd/sidelock, with the race detector when
// SIDELOCK_CHAOS_RACE=1 (slower sidecars, but data races surface).
func buildSidelock(out string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("chaos: the go command is needed to build the sidecar: %w", err)
	}
	args := []string{"build", "-o", out}
	if os.Getenv("SIDELOCK_CHAOS_RACE") == "1" {
		args = append(args, "-race")
	}
	cmd := exec.Command(gobin, append(args, "github.com/sidelock/sidelock/cmd/sidelock")...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chaos: building the sidecar: %w\n%s", err, b)
	}
	return nil
}

// Timing of every cluster: short key ttls make faults matter quickly.
const (
	keyTTL         = 2 * time.Second
	nodeTimeout    = 50 * time.Millisecond
	healthInterval = 100 * time.Millisecond
	numMasters     = 5
	numSidecars    = 3
	keyPrefix      = "chaos:"
	// shutdownTimeout bounds a sidecar's graceful shutdown (SIGTERM).
	shutdownTimeout = 2 * time.Second
)

// cluster is 5 real masters, and 3 sidelock processes each reaching every
// master through its own proxy, so network faults hit one path at a time.
type cluster struct {
	t        *testing.T
	durable  bool
	masters  []*master
	sidecars []*sidecarProc
}

// master is a redis-server whose data directory the test knows, so it can
// be wiped to simulate a master that lost its disk.
type master struct {
	*redistest.Server
	dir string
}

func startCluster(t *testing.T, durable bool) *cluster {
	t.Helper()
	c := &cluster{t: t, durable: durable}
	for range numMasters {
		dir := masterDir(t)
		opts := []redistest.Option{redistest.WithArgs("--dir", dir)}
		if durable {
			opts = append(opts, redistest.WithAppendOnly())
		}
		c.masters = append(c.masters, &master{Server: redistest.Start(t, opts...), dir: dir})
	}
	for i := range numSidecars {
		c.sidecars = append(c.sidecars, c.newSidecar(i))
	}
	for _, s := range c.sidecars {
		s.start()
	}
	// Fresh masters without persistence look restarted: one probation.
	c.waitReady(2*keyTTL + 5*time.Second)
	return c
}

// masterDir is where a master keeps its append-only file: on tmpfs when
// there is one. The faults here kill processes, not machines, and page
// cache outlives a killed process, so tmpfs keeps "appendfsync always"
// honest while its fsync costs nothing. On a VM disk the same fsyncs,
// five masters at once under load, overran the 50ms node timeout and
// turned a fault-free run into no_quorum answers.
func masterDir(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "sidelock-chaos-master-"); err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

func (c *cluster) waitReady(within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for _, s := range c.sidecars {
		for s.readyz() != http.StatusOK {
			if time.Now().After(deadline) {
				c.t.Fatalf("sidecar %d not ready within %v:\n%s", s.idx, within, s.logTail())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// directNodes connects to every master directly (not through a proxy),
// for the oracle to read keys.
func (c *cluster) directNodes() []*redisnode.Node {
	nodes := make([]*redisnode.Node, len(c.masters))
	for i, m := range c.masters {
		nodes[i] = redisnode.New(redisnode.Options{Addr: m.Addr()})
		c.t.Cleanup(func() { nodes[i].Close() })
	}
	return nodes
}

// wipe deletes a master's data files: with Restart, a durable master that
// comes back empty (a lost disk), which its settings do not reveal.
func (m *master) wipe() error {
	for _, name := range []string{"appendonlydir", "dump.rdb"} {
		if err := os.RemoveAll(filepath.Join(m.dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// healAll undoes every fault: masters running, proxies clean, sidecars up.
func (c *cluster) healAll() {
	for _, m := range c.masters {
		m.Cont()
		if !m.answers() {
			m.Restart(c.t)
		}
	}
	for _, s := range c.sidecars {
		for _, p := range s.proxies {
			p.heal()
		}
		s.cont()
		if !s.running() {
			s.start()
		}
	}
}

func (m *master) answers() bool {
	conn, err := net.DialTimeout("tcp", m.Addr(), 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// sidecarProc is one sidelock process; restarts keep its addresses, so
// its clients reconnect to the same place.
type sidecarProc struct {
	t         *testing.T
	idx       int
	api       string // http://127.0.0.1:port
	admin     string
	apiAddr   string // set by the first start
	adminAddr string
	logPath   string
	proxies   []*proxy
	env       []string

	cmd  *exec.Cmd
	exit chan struct{}
}

func (c *cluster) newSidecar(idx int) *sidecarProc {
	t := c.t
	s := &sidecarProc{t: t, idx: idx, logPath: filepath.Join(t.TempDir(), "sidelock.log")}
	addrs := make([]string, len(c.masters))
	for i, m := range c.masters {
		p, err := startProxy(m.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.close)
		s.proxies = append(s.proxies, p)
		addrs[i] = p.addr()
	}
	s.env = append(os.Environ(),
		"SIDELOCK_REDIS_ADDRS="+strings.Join(addrs, ","),
		"SIDELOCK_KEY_TTL="+keyTTL.String(), "SIDELOCK_NODE_TIMEOUT="+nodeTimeout.String(),
		"SIDELOCK_HEALTH_INTERVAL="+healthInterval.String(), "SIDELOCK_KEY_PREFIX="+keyPrefix,
		"SIDELOCK_LOG_FORMAT=json", "SIDELOCK_LOG_LEVEL=info", "SIDELOCK_SHUTDOWN_TIMEOUT="+shutdownTimeout.String(),
		"SIDELOCK_MAX_WAIT=1m", "SIDELOCK_NO_QUORUM_RETRY="+noQuorumRetry.String())
	t.Cleanup(s.kill)
	return s
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// portAttempts bounds the first start's retries: a port freeAddr found
// free can be taken (by a redis-server of another test package) before the
// sidecar binds it.
const portAttempts = 5

// start runs the process and waits until it serves /healthz. The first
// start picks the listeners' addresses, again if one was taken meanwhile;
// restarts keep them, so clients reconnect to the same place. It fails the
// test: call it from the test's goroutine only (others use tryStart).
func (s *sidecarProc) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		s.t.Fatal(err)
	}
}

// tryStart is start that returns its error instead of failing the test.
func (s *sidecarProc) tryStart() error {
	if s.apiAddr != "" {
		if err := s.launch(); err != nil {
			return fmt.Errorf("sidecar %d: %w:\n%s", s.idx, err, s.logTail())
		}
		return nil
	}
	for attempt := 1; ; attempt++ {
		api, err := freeAddr()
		admin := ""
		if err == nil {
			admin, err = freeAddr()
		}
		if err != nil {
			return fmt.Errorf("sidecar %d: %w", s.idx, err)
		}
		s.apiAddr, s.adminAddr = api, admin
		s.api, s.admin = "http://"+s.apiAddr, "http://"+s.adminAddr
		_ = os.Remove(s.logPath) // judge this attempt by its own log
		err = s.launch()
		if err == nil {
			return nil
		}
		if attempt == portAttempts || !strings.Contains(s.logTail(), "address already in use") {
			return fmt.Errorf("sidecar %d: %w:\n%s", s.idx, err, s.logTail())
		}
		s.t.Logf("sidecar %d: a listener's port was taken before it bound it; new ports", s.idx)
	}
}

func (s *sidecarProc) launch() error {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(sidelockBinary)
	cmd.Env = slices.Concat(s.env, []string{"SIDELOCK_LISTEN_ADDR=" + s.apiAddr, "SIDELOCK_ADMIN_ADDR=" + s.adminAddr})
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exit) }()
	s.cmd, s.exit = cmd, exit
	deadline := time.Now().Add(10 * time.Second)
	for !s.healthy() {
		select {
		case <-exit:
			return fmt.Errorf("exited at start")
		default:
		}
		if time.Now().After(deadline) {
			s.kill() // not left running (and its waiter with it) behind the next attempt
			return fmt.Errorf("does not serve /healthz")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func (s *sidecarProc) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exit:
		return false
	default:
		return true
	}
}

// kill is kill -9; the process's locks stay on the masters until their
// keys lapse.
func (s *sidecarProc) kill() {
	if s.running() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies only once resumed
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
}

// terminate is SIGTERM, the graceful shutdown Kubernetes starts with; it
// waits (bounded) for the process to exit and kills it after that, and
// reports whether it exited on its own.
func (s *sidecarProc) terminate(within time.Duration) bool {
	if !s.running() {
		return true
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exit:
		return true
	case <-time.After(within):
		s.kill()
		return false
	}
}

func (s *sidecarProc) stop() { s.signal(syscall.SIGSTOP) }
func (s *sidecarProc) cont() { s.signal(syscall.SIGCONT) }

func (s *sidecarProc) signal(sig syscall.Signal) {
	if s.running() {
		_ = s.cmd.Process.Signal(sig)
	}
}

var adminClient = &http.Client{Timeout: time.Second}

func (s *sidecarProc) healthy() bool {
	res, err := adminClient.Get(s.admin + "/healthz")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

// readyz is /readyz's status, or 0 when it does not answer.
func (s *sidecarProc) readyz() int {
	res, err := adminClient.Get(s.admin + "/readyz")
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// metrics reads the unlabelled samples of /metrics.
func (s *sidecarProc) metrics() (map[string]float64, error) {
	res, err := adminClient.Get(s.admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// usage is what the storm is checked against: goroutines and memory.
type usage struct {
	goroutines, rssMB, held, waiters float64
	ok                               bool
}

func (s *sidecarProc) usage() usage {
	m, err := s.metrics()
	if err != nil {
		return usage{}
	}
	return usage{goroutines: m["go_goroutines"], rssMB: m["process_resident_memory_bytes"] / (1 << 20),
		held: m["sidelock_locks_held"], waiters: m["sidelock_waiters"], ok: true}
}

// idle waits until the sidecar holds no lock and has no waiter.
func (s *sidecarProc) idle(within time.Duration) usage {
	deadline := time.Now().Add(within)
	for {
		u := s.usage()
		if (u.ok && u.held == 0 && u.waiters == 0) || time.Now().After(deadline) {
			return u
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *sidecarProc) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4<<10 {
		b = b[len(b)-4<<10:]
	}
	return string(b)
}
