//go:build linux

package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// sidelockBinary is the sidecar under test, built once by TestMain.
var sidelockBinary string

// prebuiltEnv names a sidelock binary to test instead of building one:
// another commit's, or one broken on purpose to see the oracle catch it.
const prebuiltEnv = "SIDELOCK_CHAOS_BIN"

func TestMain(m *testing.M) {
	if url := os.Getenv(holderEnv); url != "" {
		os.Exit(runHolderProcess(url))
	}
	if mode() == "" {
		os.Exit(m.Run()) // every test skips: nothing to build
	}
	if bin := os.Getenv(prebuiltEnv); bin != "" {
		sidelockBinary = bin
		os.Exit(m.Run())
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
	var flags []string
	if os.Getenv("SIDELOCK_CHAOS_RACE") == "1" {
		flags = append(flags, "-race")
	}
	if err := sidecartest.BuildTo(out, flags...); err != nil {
		return fmt.Errorf("chaos: %w", err)
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
	proxies   []*proxy
	env       []string // of every start; a scenario may add to it
	proc      *sidecartest.Process
}

func (c *cluster) newSidecar(idx int) *sidecarProc {
	t := c.t
	s := &sidecarProc{t: t, idx: idx}
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
	// After the proxies: at the end the sidecar is killed before they close.
	s.proc = sidecartest.New(t, sidelockBinary, sidecartest.Options{ReadyPath: "/healthz", ReadyWithin: 10 * time.Second})
	return s
}

// start runs the process and waits until it serves /healthz (the first
// start picks the listeners' addresses; restarts keep them). It fails the
// test: call it from the test's goroutine only (others use tryStart).
func (s *sidecarProc) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		s.t.Fatal(err)
	}
}

// tryStart is start that returns its error instead of failing the test.
func (s *sidecarProc) tryStart() error {
	if err := s.proc.Launch(s.env); err != nil {
		return fmt.Errorf("sidecar %d: %w", s.idx, err)
	}
	if s.apiAddr == "" { // the first start; restarts keep the addresses
		s.apiAddr, s.adminAddr = s.proc.APIAddr(), s.proc.AdminAddr()
		s.api, s.admin = s.proc.API(), s.proc.Admin()
	}
	return nil
}

func (s *sidecarProc) running() bool { return s.proc.Running() }

// kill is kill -9; the process's locks stay on the masters until their
// keys lapse.
func (s *sidecarProc) kill() { s.proc.Kill() }

// terminate is SIGTERM, the graceful shutdown Kubernetes starts with; it
// waits (bounded) for the process to exit and kills it after that, and
// reports whether it exited on its own.
func (s *sidecarProc) terminate(within time.Duration) bool {
	return !errors.Is(s.proc.Stop(within), sidecartest.ErrNoExit)
}

func (s *sidecarProc) stop() { s.signal(syscall.SIGSTOP) }
func (s *sidecarProc) cont() { s.signal(syscall.SIGCONT) }

func (s *sidecarProc) signal(sig syscall.Signal) {
	if s.running() {
		_ = s.proc.Signal(sig)
	}
}

var adminClient = &http.Client{Timeout: time.Second}

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

func (s *sidecarProc) logTail() string { return s.proc.LogTail() }
