package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// childEnv makes the test binary run the sidecar itself, so end-to-end
// tests exercise real processes (kill -9, SIGTERM) without a separate build.
const childEnv = "SIDELOCK_E2E_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sidecar is a sidelock process under test: the test binary itself,
// running main (see childEnv).
type sidecar struct {
	*sidecartest.Process
	api, admin string // http://127.0.0.1:port
}

// durableMasters start with appendonly and appendfsync always: a sidecar
// lets them count at once, where fresh masters without persistence would
// sit out a restart probation (nothing tells them from restarted ones).
// The safety guard tests start plain masters.
func durableMasters(t *testing.T, n int) []*redistest.Server {
	t.Helper()
	return redistest.StartN(t, n, redistest.WithAppendOnly())
}

func startSidecar(t *testing.T, masters []*redistest.Server, env ...string) *sidecar {
	t.Helper()
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	return startSidecarAt(t, addrs, env...)
}

// startSidecarAt runs a sidecar over masters at addrs (for TLS ports that
// redistest does not know about) and waits until it serves /healthz.
func startSidecarAt(t *testing.T, addrs []string, env ...string) *sidecar {
	t.Helper()
	p := sidecartest.Start(t, os.Args[0], sidecarEnv(addrs, env),
		sidecartest.Options{ReadyPath: "/healthz", ReadyWithin: 10 * time.Second})
	return &sidecar{Process: p, api: p.API(), admin: p.Admin()}
}

// sidecarEnv is the environment of a sidecar over the masters at addrs;
// env comes last, so it overrides the defaults.
func sidecarEnv(addrs []string, env []string) []string {
	return slices.Concat(os.Environ(), []string{childEnv + "=1",
		"SIDELOCK_REDIS_ADDRS=" + strings.Join(addrs, ","),
		"SIDELOCK_HEALTH_INTERVAL=100ms", "SIDELOCK_LOG_LEVEL=debug", "SIDELOCK_KEY_PREFIX=e2e:"}, env)
}

// sidecarCommand runs the sidecar over the masters at addrs; env comes
// last, so it overrides the defaults.
func sidecarCommand(addrs []string, apiAddr, adminAddr string, env []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	listeners := []string{"SIDELOCK_LISTEN_ADDR=" + apiAddr, "SIDELOCK_ADMIN_ADDR=" + adminAddr}
	cmd.Env = sidecarEnv(addrs, append(listeners, env...))
	return cmd
}

// refusedStart runs a sidecar over addrs that must refuse to start, and
// returns what it printed.
func refusedStart(t *testing.T, addrs []string, env ...string) string {
	t.Helper()
	cmd := sidecarCommand(addrs, sidecartest.FreeAddr(t), sidecartest.FreeAddr(t), env)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err == nil || cmd.ProcessState.ExitCode() <= 0 {
		t.Fatalf("started (or was killed after 10s) over %v: %v\n%s", addrs, err, out)
	}
	t.Logf("refused to start within %v", time.Since(start))
	return string(out)
}

// syncWriter collects a child's output; exec copies it on its own goroutine.
type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// do sends a request to the sidecar and decodes its JSON answer.
func (s *sidecar) do(t *testing.T, method, path, token string) (int, map[string]any) {
	t.Helper()
	return doJSON(t, http.DefaultClient, method, s.api+path, token)
}

// doJSON sends a request with the lease's token (if any) through client
// and decodes the JSON answer.
func doJSON(t *testing.T, client *http.Client, method, url, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Lock-Token", token)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body
}

func (s *sidecar) acquire(t *testing.T, path string) string {
	t.Helper()
	code, body := s.do(t, "POST", path, "")
	if code != 200 {
		t.Fatalf("acquire %s: %d %v", path, code, body)
	}
	return body["token"].(string)
}

func (s *sidecar) readyz(t *testing.T) int {
	res, err := http.Get(s.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// readyzMasters returns the masters of /readyz, whatever its status.
func (s *sidecar) readyzMasters(t *testing.T) []map[string]any {
	t.Helper()
	res, err := http.Get(s.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct{ Masters []map[string]any }
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Masters
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// keyOn reads a lock's key straight from one master.
func keyOn(t *testing.T, m *redistest.Server, name string) (string, time.Duration) {
	t.Helper()
	n := redisnode.New(redisnode.Options{Addr: m.Addr()})
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	v, ttl, err := n.Get(ctx, "e2e:"+name)
	if err != nil {
		t.Fatal(err)
	}
	return v, ttl
}

func TestE2EAcquireConflictExtendRelease(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	tok := a.acquire(t, "/locks/orders/42?owner=pod-a")
	if code, body := b.do(t, "POST", "/locks/orders/42", ""); code != 409 || body["code"] != "lock_held" {
		t.Fatalf("other sidecar: %d %v", code, body)
	}
	if code, body := b.do(t, "GET", "/locks/orders/42", ""); code != 200 || body["held"] != true || body["owner"] != "pod-a" {
		t.Fatalf("inspect from the other sidecar: %d %v", code, body)
	}
	if code, _ := a.do(t, "PUT", "/locks/orders/42?ttl=45s", tok); code != 200 {
		t.Fatalf("extend: %d", code)
	}
	if code, _ := b.do(t, "PUT", "/locks/orders/42", tok); code != 410 {
		t.Fatalf("extend through a sidecar that does not hold it: %d", code)
	}
	if code, _ := a.do(t, "DELETE", "/locks/orders/42", tok); code != 204 {
		t.Fatalf("release: %d", code)
	}
	// The release reaches the masters a round after the 204 (docs/api.md):
	// another pod that takes over waits for it, as a caller of it would.
	b.acquire(t, "/locks/orders/42?wait=5s")
}

// A lease with ttl=60s stays held past several key ttls while its caller
// heartbeats, and the keys on the masters carry only the short key ttl.
func TestE2EHeartbeatKeepsALockPastSeveralKeyTTLs(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters, "SIDELOCK_KEY_TTL=1s", "SIDELOCK_NODE_TIMEOUT=50ms")
	b := startSidecar(t, masters)
	tok := a.acquire(t, "/locks/long?ttl=60s")
	for range 4 {
		time.Sleep(time.Second)
		if code, _ := a.do(t, "PUT", "/locks/long", tok); code != 200 {
			t.Fatalf("heartbeat: %d", code)
		}
		if code, _ := b.do(t, "POST", "/locks/long", ""); code != 409 {
			t.Fatalf("another sidecar got the lock while its holder heartbeats: %d", code)
		}
	}
	if _, ttl := keyOn(t, masters[0], "long"); ttl <= 0 || ttl > time.Second {
		t.Fatalf("key ttl on the master is %v, want at most the 1s key ttl", ttl)
	}
}

// A lease with ttl=2s and no heartbeat is free again within about 3s.
func TestE2ELeaseWithoutHeartbeatIsFreeWithin3s(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	a.acquire(t, "/locks/short?ttl=2s")
	took := eventually(t, 3500*time.Millisecond, "lock free again", func() bool {
		code, _ := b.do(t, "POST", "/locks/short", "")
		return code == 200
	})
	t.Logf("free again %v after acquire with ttl=2s", took)
	if took < 1900*time.Millisecond {
		t.Fatalf("free after %v, before its ttl", took)
	}
}

// After kill -9 of the sidecar its locks are acquirable from another
// sidecar within one key ttl.
func TestE2EKilledSidecarFreesItsLocksWithinOneKeyTTL(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters, "SIDELOCK_KEY_TTL=2s")
	b := startSidecar(t, masters)
	a.acquire(t, "/locks/orphan?ttl=1h")
	if err := a.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 3*time.Second, "lock free after kill -9", func() bool {
		code, _ := b.do(t, "POST", "/locks/orphan", "")
		return code == 200
	})
	t.Logf("free %v after kill -9 (key ttl 2s)", took)
}

// With 1 of 3 masters down acquisition works; with 2 of 3 down /readyz
// turns 503 within a few seconds and acquire answers 503 promptly; service
// resumes when they return.
func TestE2EQuorumLossAndRecovery(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters)
	eventually(t, 3*time.Second, "ready", func() bool { return a.readyz(t) == 200 })
	masters[0].Kill()
	a.acquire(t, "/locks/minority-down")
	masters[1].Kill()
	took := eventually(t, 3*time.Second, "/readyz 503", func() bool { return a.readyz(t) == 503 })
	t.Logf("/readyz turned 503 %v after the second master died", took)
	start := time.Now()
	if code, body := a.do(t, "POST", "/locks/majority-down", ""); code != 503 || body["code"] != "no_quorum" {
		t.Fatalf("acquire without quorum: %d %v", code, body)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("acquire without quorum took %v", d)
	}
	masters[0].Restart(t)
	masters[1].Restart(t)
	eventually(t, 5*time.Second, "ready again", func() bool { return a.readyz(t) == 200 })
	a.acquire(t, "/locks/majority-back")
}

// SIGTERM ends the sidecar promptly but deletes no key whose valid_until a
// caller was promised: a caller may still act until then, so another
// sidecar must not get the lock before. The keys lapse within a key ttl.
func TestE2ESIGTERMLeavesPromisedKeysToLapse(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters, "SIDELOCK_KEY_TTL=2s")
	b := startSidecar(t, masters)
	// Each lock is judged against its own promise: on a loaded machine the
	// five grants, and so their valid_untils, can be 100 ms apart.
	var latest time.Time
	valid := make([]time.Time, 5)
	for i := range valid {
		code, body := a.do(t, "POST", fmt.Sprintf("/locks/job/%d?ttl=1h", i), "")
		if code != 200 {
			t.Fatalf("acquire: %d %v", code, body)
		}
		var err error
		if valid[i], err = time.Parse(time.RFC3339Nano, body["valid_until"].(string)); err != nil {
			t.Fatal(err)
		}
		latest = later(latest, valid[i])
	}
	if err := a.Stop(10 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	for time.Now().Before(latest.Add(-50 * time.Millisecond)) {
		for i := range valid {
			if !time.Now().Before(valid[i]) {
				continue // its promise has passed: its keys may lapse
			}
			// A grant answered before valid_until was made before it.
			code, body := b.do(t, "POST", fmt.Sprintf("/locks/job/%d", i), "")
			if answered := time.Now(); code == 200 && answered.Before(valid[i]) {
				t.Fatalf("job/%d granted elsewhere (answered at %v), before the valid_until %v promised to its holder: %v",
					i, answered.Format(time.StampMilli), valid[i].Format(time.StampMilli), body)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	eventually(t, 3*time.Second, "the keys lapsed", func() bool {
		code, _ := b.do(t, "POST", "/locks/job/0", "")
		return code == 200
	})
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// A waiter on sidecar B acquires promptly after the holder on sidecar A
// releases: the release is announced through the masters' Pub/Sub.
func TestE2EWaiterOnAnotherSidecarAcquiresPromptlyAfterRelease(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	tok := a.acquire(t, "/locks/handoff")
	granted := make(chan time.Time, 1)
	go func() {
		code, body := b.do(t, "POST", "/locks/handoff?wait=10s", "")
		if code != 200 {
			t.Errorf("waiter: %d %v", code, body)
		}
		granted <- time.Now()
	}()
	time.Sleep(300 * time.Millisecond) // the waiter is queued and subscribed
	released := time.Now()
	if code, _ := a.do(t, "DELETE", "/locks/handoff", tok); code != 204 {
		t.Fatalf("release: %d", code)
	}
	handoff := (<-granted).Sub(released)
	t.Logf("hand-off from sidecar A's release to sidecar B's grant: %v", handoff)
	if handoff > 200*time.Millisecond {
		t.Fatalf("hand-off took %v, want far below the 250ms fallback poll", handoff)
	}
}

// A timed-out wait answers 409 close to the requested wait.
func TestE2EWaitTimesOutCloseToTheWait(t *testing.T) {
	masters := durableMasters(t, 3)
	a, b := startSidecar(t, masters), startSidecar(t, masters)
	a.acquire(t, "/locks/busy")
	start := time.Now()
	code, body := b.do(t, "POST", "/locks/busy?wait=700ms", "")
	took := time.Since(start)
	if code != 409 || body["code"] != "lock_held" || took < 700*time.Millisecond || took > 1200*time.Millisecond {
		t.Fatalf("%d %v after %v, want 409 after about 700ms", code, body, took)
	}
}

// A waiter whose client disconnects leaves the queue and never ends up
// holding the lock.
func TestE2EDisconnectedWaiterNeverHoldsTheLock(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters)
	tok := a.acquire(t, "/locks/gone")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", a.api+"/locks/gone?wait=10s", nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			t.Errorf("the waiter got an answer: %d", res.StatusCode)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	cancel() // the client goes away
	<-done
	time.Sleep(100 * time.Millisecond)
	if code, _ := a.do(t, "DELETE", "/locks/gone", tok); code != 204 {
		t.Fatalf("release: %d", code)
	}
	time.Sleep(300 * time.Millisecond)
	if code, body := a.do(t, "GET", "/locks/gone", ""); code != 200 || body["held"] != false {
		t.Fatalf("after the holder released, the lock is %v: the departed waiter holds it", body)
	}
	if code, body := a.do(t, "GET", "/locks", ""); code != 200 || len(body["locks"].([]any)) != 0 {
		t.Fatalf("leases left: %v", body)
	}
}

// A retried acquire with the same Idempotency-Key returns the same token.
func TestE2EIdempotentReacquireReturnsTheSameToken(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters)
	post := func() (int, map[string]any) {
		req, _ := http.NewRequest("POST", a.api+"/locks/report?ttl=30s", nil)
		req.Header.Set("Idempotency-Key", "nightly-2026-11-21")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body
	}
	c1, first := post()
	c2, second := post()
	if c1 != 200 || c2 != 200 || first["token"] != second["token"] {
		t.Fatalf("first %d %v, retry %d %v", c1, first, c2, second)
	}
}

// Two addresses that reach one master would count it twice: the sidecar
// refuses to start and names both.
func TestE2ERefusesTwoAddressesOfOneMaster(t *testing.T) {
	// On 127.0.0.1, so that "localhost:port" reaches the same server.
	masters := redistest.StartN(t, 2, redistest.WithAppendOnly(), redistest.WithHost("127.0.0.1"))
	_, port, _ := net.SplitHostPort(masters[1].Addr())
	alias := net.JoinHostPort("localhost", port)
	out := refusedStart(t, []string{masters[0].Addr(), masters[1].Addr(), alias})
	for _, want := range []string{"refusing to start", masters[1].Addr() + " and " + alias + " are the same server"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output does not say %q:\n%s", want, out)
		}
	}
}

// A replica's keys follow its master's: the sidecar refuses to start.
func TestE2ERefusesAReplica(t *testing.T) {
	masters := durableMasters(t, 2)
	host, port, _ := net.SplitHostPort(masters[0].Addr())
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", host, port))
	out := refusedStart(t, []string{masters[0].Addr(), masters[1].Addr(), replica.Addr()})
	if want := replica.Addr() + " is a replica"; !strings.Contains(out, want) {
		t.Fatalf("output does not say %q:\n%s", want, out)
	}
}

// A master that is merely down at start-up is no reason to refuse: it is
// checked once it answers.
func TestE2EStartsWithAMasterDown(t *testing.T) {
	masters := durableMasters(t, 3)
	masters[2].Kill()
	a := startSidecar(t, masters)
	a.acquire(t, "/locks/one-down")
	if !strings.Contains(a.Log(), "master not checked at start-up") {
		t.Fatalf("the unchecked master is not logged:\n%s", a.Log())
	}
	masters[2].Restart(t)
	eventually(t, 3*time.Second, "the returning master counts", func() bool {
		return a.readyzMasters(t)[2]["eligible"] == true
	})
}

// A master without persistence killed and restarted empty sits out a
// probation of the key ttl: the other two keep the quorum, but with one of
// them down nothing is granted until the probation ends.
func TestE2ERestartedMasterSitsOutItsProbation(t *testing.T) {
	const keyTTL = 2 * time.Second
	masters := redistest.StartN(t, 3) // no persistence: a restart forgets keys
	a := startSidecar(t, masters, "SIDELOCK_KEY_TTL="+keyTTL.String())
	took := eventually(t, 3*keyTTL, "fresh masters past their probation", func() bool { return a.readyz(t) == 200 })
	t.Logf("fresh masters counted %v after the sidecar started", took)

	restartBegan := time.Now()
	masters[0].Restart(t) // kill -9, then start again, empty
	var m0 map[string]any
	// go-redis may fail fast for up to ~1s after a master returns (its dial
	// back-off), so the master can look down before it looks on probation.
	eventually(t, 3*time.Second, "/readyz shows the restarted master on probation", func() bool {
		m0 = a.readyzMasters(t)[0]
		return m0["eligible"] == false && m0["probation_remaining"] != nil
	})
	t.Logf("restarted master in /readyz: %v", m0)
	a.acquire(t, "/locks/two-masters-left")

	masters[1].Kill()
	res, err := http.Post(a.api+"/locks/one-master-left", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if time.Since(restartBegan) < keyTTL {
		// The answer says the master is on probation, and when enough
		// masters count again.
		detail, _ := body["detail"].(string)
		if res.StatusCode != 503 || body["code"] != "no_quorum" || !strings.Contains(detail, "probation") || res.Header.Get("Retry-After") == "" {
			t.Fatalf("acquire with one eligible master: %d %v (Retry-After %q)", res.StatusCode, body, res.Header.Get("Retry-After"))
		}
		t.Logf("503 while on probation: %s (Retry-After %s)", detail, res.Header.Get("Retry-After"))
	}
	eventually(t, 2*keyTTL, "acquire once the probation ends", func() bool {
		code, _ := a.do(t, "POST", "/locks/one-master-left", "")
		return code == 200
	})
	out := time.Since(restartBegan)
	t.Logf("acquired %v after the restart began (key ttl %v)", out, keyTTL)
	if out < keyTTL {
		t.Fatalf("a quorum counted the restarted master %v after its restart, before the %v probation", out, keyTTL)
	}
}

// Waiters on one sidecar process are granted in arrival order.
func TestE2EWaitersOfOneSidecarAreServedInArrivalOrder(t *testing.T) {
	masters := durableMasters(t, 3)
	a := startSidecar(t, masters)
	tok := a.acquire(t, "/locks/fifo")
	const waiters = 5
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	defer wg.Wait() // each waiter releases before the sidecar stops
	for i := range waiters {
		wg.Go(func() {
			code, body := a.do(t, "POST", "/locks/fifo?wait=20s", "")
			if code != 200 {
				t.Errorf("waiter %d: %d %v", i, code, body)
				order <- -1
				return
			}
			order <- i
			time.Sleep(20 * time.Millisecond)
			a.do(t, "DELETE", "/locks/fifo", body["token"].(string))
		})
		eventually(t, 5*time.Second, "waiter queued", func() bool { return metricValue(t, a, "sidelock_waiters") == float64(i+1) })
	}
	a.do(t, "DELETE", "/locks/fifo", tok)
	for want := range waiters {
		if got := <-order; got != want {
			t.Fatalf("grant %d went to waiter %d: not arrival order", want, got)
		}
	}
}

// metricValue reads one unlabelled gauge from the sidecar's /metrics.
func metricValue(t *testing.T, s *sidecar, name string) float64 {
	t.Helper()
	v, n := metricSum(t, s, name+" ")
	if n == 0 {
		return -1
	}
	return v
}

// metricSum adds up the samples of the sidecar's /metrics whose line
// starts with prefix (a name and a space, or a name and '{' for all its
// series), and says how many there were.
func metricSum(t *testing.T, s *sidecar, prefix string) (float64, int) {
	t.Helper()
	res, err := http.Get(s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var sum float64
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, prefix) {
			var f float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &f)
			sum += f
			n++
		}
	}
	return sum, n
}
