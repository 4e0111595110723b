//go:build linux

package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sidelock/sidelock/internal/ctxsleep"
	"github.com/sidelock/sidelock/pkg/client"
)

// The abuse scenario (issue 14): a flood of idle connections and bursts of
// try-once acquires against sidecar 0 while holders on it heartbeat. What
// must hold: no existing holder loses its lock, the kubelet's /healthz
// probe never fails, and no acquire is refused no_quorum while every
// master is healthy (429 overloaded is the honest answer to overload).
// test/abuse measures the same at full size; this is the bounded version
// the oracle watches.
const (
	abused = 0 // the sidecar under abuse
	// abuseConnCap is SIDELOCK_MAX_CONNS of the abused sidecar, when the
	// binary has that setting: small, so the flood reaches it cheaply.
	abuseConnCap = 256
	// abuseFloodNoCap is the flood's size against a binary without a cap.
	abuseFloodNoCap = 512
	abuseBurst      = 500 // concurrent try-once acquires per burst
	abuseLeases     = 6   // heartbeating holders on the abused sidecar
	abuseStreams    = 3   // held connections on it
	// abuseBeatEvery leaves a holder three beats before its valid_until
	// (a key ttl less the time a round took): one slow beat on a busy
	// machine is not a lost lock.
	abuseBeatEvery   = keyTTL / 4
	abuseBeatTimeout = time.Second
)

// abuseScenario is the scenario with its fault and expectations sharing
// what the fault saw.
func abuseScenario() scenario {
	st := &abuseState{}
	return scenario{name: "abuse: connection flood + try-once bursts on sidecar0 while its holders heartbeat", durable: true, ci: true,
		fault: st.fault, extra: st.expectations}
}

// abuseState is what the abuse fault saw, for its expectations.
type abuseState struct {
	connCap int // 0: the binary has no SIDELOCK_MAX_CONNS
	flood   abuseFloodResult
	bursts  []map[string]int // answers by cause, one map per burst
	health  abuseProbes
	holders abuseHolderStats
}

func (st *abuseState) fault(r *run, mode string) {
	car := r.c.sidecars[abused]
	st.capConnections(r)
	h := startAbuseHolders(r, car)
	stopHealth := pollHealthz(car.admin + "/healthz")
	r.beginFault()
	st.bursts = append(st.bursts, abuseBurstOnce(car, 0)) // reaches the lock engine
	size := abuseFloodNoCap
	if st.connCap > 0 {
		size = st.connCap // fills the cap: what comes next is beyond it
	}
	flood := openAbuseFlood(car.apiAddr, size)
	st.bursts = append(st.bursts, abuseBurstOnce(car, 1)) // beyond the cap, when there is one
	r.sleep(time.Until(r.faultStart.Add(faultTime(mode))))
	st.flood = flood.result()
	flood.closeAll()
	r.endFault()
	r.sleep(keyTTL / 2) // the holders beat after the flood too: a loss shows
	st.health, st.holders = stopHealth(), h.stop()
	r.note("flood of %d idle connections: %s; bursts of %d: %s; sidecar0 /healthz: %d of %d probes failed, max %v; "+
		"its %d holders: %d of %d beats failed (%s), %d locks lost",
		size, st.flood.text(), abuseBurst, burstsText(st.bursts), st.health.failed, st.health.n, st.health.max.Round(time.Millisecond),
		abuseLeases+abuseStreams, st.holders.beatFailed, st.holders.beats, countsText(st.holders.causes), st.holders.lost)
}

// capConnections restarts the abused sidecar with SIDELOCK_MAX_CONNS (a
// graceful restart, before the fault window) when the binary has the
// setting, so the flood is sized to a cap it can reach. Every cluster
// starts with one environment; a restart is how one scenario sets its
// own, and the oracle's promise checks cover it as in the SIGTERM
// scenario (the restarted sidecar is left out of the before/after
// goroutine and RSS comparison).
func (st *abuseState) capConnections(r *run) {
	if !binaryHas("SIDELOCK_MAX_CONNS") {
		r.note("the sidecar has no SIDELOCK_MAX_CONNS: flooded with %d connections, uncapped", abuseFloodNoCap)
		return
	}
	car := r.c.sidecars[abused]
	car.env = append(car.env, fmt.Sprintf("SIDELOCK_MAX_CONNS=%d", abuseConnCap))
	if !car.terminate(shutdownTimeout + 5*time.Second) {
		r.t.Errorf("sidecar%d still running %v after SIGTERM: killed", abused, shutdownTimeout+5*time.Second)
	}
	r.restartSidecar(abused)
	for deadline := time.Now().Add(10 * time.Second); car.readyz() != http.StatusOK && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	st.connCap = abuseConnCap
	r.note("sidecar%d restarted with SIDELOCK_MAX_CONNS=%d", abused, abuseConnCap)
}

// expectations are the scenario's own checks; the oracle's apply as well.
func (st *abuseState) expectations(r *run, res result) []string {
	var out []string
	if st.holders.lost > 0 {
		out = append(out, fmt.Sprintf("%d of %d existing holders on sidecar%d lost their lock during the abuse (%s)",
			st.holders.lost, abuseLeases+abuseStreams, abused, countsText(st.holders.causes)))
	}
	if st.health.failed > 0 {
		out = append(out, fmt.Sprintf("/healthz on sidecar%d failed %d of %d probes (1s timeout; slowest %v): the kubelet would restart it",
			abused, st.health.failed, st.health.n, st.health.max.Round(time.Millisecond)))
	}
	burstNoQuorum := 0
	for _, b := range st.bursts {
		burstNoQuorum += b["no_quorum"]
	}
	// Only the abused sidecar is judged: the others, and the masters, share
	// this machine's two cores with the burst, so to them the masters
	// really are slow (in a cluster the masters run elsewhere).
	workers := res.v.failuresOn[abused]["no_quorum"]
	if n := burstNoQuorum + workers; n > 0 {
		if mastersMissedByOthers(r.c.sidecars, res) {
			// The masters were slow for another sidecar too (the burst
			// shares the machine's two cores with them): to the abused
			// sidecar also they were out of reach, so no_quorum was the
			// truth, not its own overload. The promise itself is judged
			// with the masters on a CPU of their own, by test-load's
			// TestBurstOfTryOnceIsOverloadNotNoQuorum.
			r.note("%d acquires on sidecar%d answered no_quorum while another sidecar missed a quorum too (the masters were slow): not counted", n, abused)
			return out
		}
		out = append(out, fmt.Sprintf("%d acquires on sidecar%d answered no_quorum while every master was healthy (%d of the bursts', %d of the workers'): overload must say 429 overloaded",
			n, abused, burstNoQuorum, workers))
	}
	return out
}

// mastersMissedByOthers tells whether a sidecar not under abuse missed a
// quorum of masters as well: its health checks lost it, a lock call of its
// own did not reach it in time (a release, a renewal), or one of its
// workers' acquires answered no_quorum. The masters were then slow, not
// only to the abused sidecar. (The health checks alone no longer tell: a
// stall shorter than SIDELOCK_HEALTH_DOWN_AFTER calls no master down; and
// a sidecar that happened to make no call while the masters were slow
// missed nothing.)
func mastersMissedByOthers(sidecars []*sidecarProc, res result) bool {
	for i, s := range sidecars {
		if i == abused {
			continue
		}
		log := s.logTail()
		if strings.Contains(log, `"msg":"quorum changed","ready":false`) ||
			strings.Contains(log, "did not reach a quorum") || strings.Contains(log, "renewals keep failing") ||
			res.v.failuresOn[i]["no_quorum"] > 0 {
			return true
		}
	}
	return false
}

// binaryHas reports whether the sidecar under test documents a setting
// (its -h lists every SIDELOCK_* variable).
func binaryHas(setting string) bool {
	out, _ := exec.Command(sidelockBinary, "-h").CombinedOutput()
	// The settings table pads its columns with spaces (tabs before text/tabwriter).
	return strings.Contains(string(out), setting+" ") || strings.Contains(string(out), setting+"\t")
}

// abuseProbes is what the /healthz poller saw.
type abuseProbes struct {
	n, failed int
	max       time.Duration
}

// pollHealthz GETs url every 100ms over a new connection with a 1s
// timeout, as the kubelet probes, until the returned stop is called.
func pollHealthz(url string) (stop func() abuseProbes) {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var p abuseProbes
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			began := time.Now()
			res, err := hc.Get(url)
			if err == nil {
				res.Body.Close()
			}
			p.n++
			p.max = max(p.max, time.Since(began))
			if err != nil || res.StatusCode != http.StatusOK {
				p.failed++
			}
			ctxsleep.For(ctx, 100*time.Millisecond)
		}
	}()
	return func() abuseProbes { cancel(); <-done; return p }
}

// abuseHolderStats is what the existing holders saw.
type abuseHolderStats struct {
	beats, beatFailed, lost int
	causes                  map[string]int
}

// abuseHolders hold private names on the abused sidecar from before the
// abuse until after it: plain leases that heartbeat, and held
// connections. Their promises go to the oracle like every other grant's.
type abuseHolders struct {
	r      *run
	car    *sidecarProc
	wg     sync.WaitGroup
	cancel context.CancelFunc
	mu     sync.Mutex
	st     abuseHolderStats
}

func startAbuseHolders(r *run, car *sidecarProc) *abuseHolders {
	ctx, cancel := context.WithCancel(context.Background())
	h := &abuseHolders{r: r, car: car, cancel: cancel, st: abuseHolderStats{causes: map[string]int{}}}
	// Every holder holds its lock before the abuse begins: acquired is
	// done once each has its lock (or gave up, which fails the test).
	var acquired sync.WaitGroup
	acquired.Add(abuseLeases + abuseStreams)
	for i := range abuseLeases {
		h.wg.Go(func() { h.lease(ctx, fmt.Sprintf("abuse/lease/%d", i), acquired.Done) })
	}
	for i := range abuseStreams {
		h.wg.Go(func() { h.stream(ctx, fmt.Sprintf("abuse/stream/%d", i), acquired.Done) })
	}
	acquired.Wait() // bounded: each acquire has a timeout
	return h
}

// abuseHTTP is one holder's own client: an application process with its
// own keep-alive connection.
func abuseHTTP() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}}
}

// lease acquires name and heartbeats it until ctx ends, then releases
// it. It is lost when a beat answers lease_gone or its valid_until passes
// without a renewal.
func (h *abuseHolders) lease(ctx context.Context, name string, acquired func()) {
	hc := abuseHTTP()
	defer hc.CloseIdleConnections()
	api := client.New(h.car.api, hc)
	owner := "abuse-" + strings.ReplaceAll(name, "/", "-")
	l, err := acquireCalm(ctx, api, name, owner)
	acquired()
	if err != nil {
		h.r.t.Errorf("abuse holder %s: no lock before the abuse: %v", name, err)
		return
	}
	p := h.r.o.granted(lock(name), owner, "abuse heartbeat", h.car.idx, l.Fence, wallNow(), l.ValidUntil)
	deadline := deadlineOf(l.ValidUntil)
	for {
		ctxsleep.For(ctx, abuseBeatEvery)
		if ctx.Err() != nil {
			h.releaseLease(api, name, l.Token, p)
			return
		}
		bctx, cancel := context.WithTimeout(ctx, abuseBeatTimeout)
		nl, err := api.Extend(bctx, name, l.Token, 0)
		cancel()
		if ctx.Err() != nil {
			continue // stopping, not a failed beat
		}
		if err == nil {
			h.r.o.promised(p, nl.ValidUntil, "heartbeat")
			deadline = deadlineOf(nl.ValidUntil)
		}
		if lost := h.beat(err, deadline); lost != "" {
			h.r.o.kept(p, "abuse holder lost its lock: "+lost)
			return
		}
	}
}

// acquireCalm takes a lock before the abuse, with a few tries (at most
// ~12s): the restarted sidecar may still be settling.
func acquireCalm(ctx context.Context, api *client.Client, name, owner string) (client.Lease, error) {
	var err error
	for range 5 {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var l client.Lease
		l, err = api.Acquire(actx, name, client.Options{TTL: keyTTL, Wait: time.Second, Owner: owner})
		cancel()
		if err == nil {
			return l, nil
		}
		ctxsleep.For(ctx, 200*time.Millisecond)
	}
	return client.Lease{}, err
}

// beat records one heartbeat and returns why the lock is lost, if it is.
func (h *abuseHolders) beat(err error, deadline time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.st.beats++
	if err != nil {
		h.st.beatFailed++
		h.st.causes[abuseCause(err)]++
	}
	var lost string
	switch {
	case errors.Is(err, client.ErrLeaseGone):
		lost = "lease_gone"
	case !time.Now().Before(deadline):
		lost = "valid_until passed without a renewal"
	}
	if lost != "" {
		h.st.lost++
		h.st.causes["lost: "+lost]++
	}
	return lost
}

func (h *abuseHolders) releaseLease(api *client.Client, name, token string, p *promise) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTime)
	defer cancel()
	h.r.o.releasing(p, wallNow())
	_ = api.Release(ctx, name, token)
}

// stream holds name over a connection until ctx ends. It is lost when the
// stream warns (expiring), ends, or breaks before that.
func (h *abuseHolders) stream(ctx context.Context, name string, acquired func()) {
	hc := abuseHTTP()
	defer hc.CloseIdleConnections()
	owner := "abuse-" + strings.ReplaceAll(name, "/", "-")
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	held, err := client.New(h.car.api, hc).Hold(actx, name, client.Options{Wait: time.Second, Owner: owner})
	cancel()
	acquired()
	if err != nil {
		h.r.t.Errorf("abuse holder %s: no lock before the abuse: %v", name, err)
		return
	}
	p := h.r.o.granted(lock(name), owner, "abuse held stream", h.car.idx, held.Lease.Fence, wallNow(), held.Lease.ValidUntil)
	for {
		select {
		case <-ctx.Done():
			h.r.o.releasing(p, wallNow())
			held.Release()
			for e := range held.Events() {
				h.recordEvent(p, e)
			}
			return
		case e, ok := <-held.Events():
			if !ok || e.Kind != "renewed" {
				h.streamLost(p, e, ok)
				held.Release()
				return
			}
			h.recordEvent(p, e)
		}
	}
}

func (h *abuseHolders) recordEvent(p *promise, e client.Event) {
	if !e.ValidUntil.IsZero() {
		h.r.o.promised(p, e.ValidUntil, e.Kind)
	}
}

func (h *abuseHolders) streamLost(p *promise, e client.Event, open bool) {
	h.recordEvent(p, e)
	why := "stream " + e.Kind + " " + e.Reason
	if !open {
		why = "stream broke"
	}
	h.r.o.kept(p, "abuse holder lost its lock: "+why)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.st.lost++
	h.st.causes["lost: "+why]++
}

// stop ends the holders (releasing their locks) and returns what they saw.
func (h *abuseHolders) stop() abuseHolderStats {
	h.cancel()
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st
}

// abuseBurstOnce fires abuseBurst try-once acquires of free names at one
// signal, each over a new connection, and releases what it got. It
// returns the answers by cause ("granted", "overloaded", "no_quorum", ...).
func abuseBurstOnce(car *sidecarProc, round int) map[string]int {
	tr := &http.Transport{MaxIdleConnsPerHost: abuseBurst, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	api := client.New(car.api, &http.Client{Transport: tr, Timeout: 5 * time.Second})
	counts := map[string]int{}
	var mu sync.Mutex
	var granted []client.Lease
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range abuseBurst {
		wg.Go(func() {
			<-start
			l, err := api.Acquire(context.Background(), fmt.Sprintf("abuse/burst/%d/%d", round, i), client.Options{TTL: keyTTL})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				counts[abuseCause(err)]++
				return
			}
			counts["granted"]++
			granted = append(granted, l)
		})
	}
	close(start)
	wg.Wait()
	for _, l := range granted { // sequential: a few hundred local round trips
		ctx, cancel := context.WithTimeout(context.Background(), releaseTime)
		_ = api.Release(ctx, l.Name, l.Token)
		cancel()
	}
	return counts
}

// abuseFlood is a set of idle keep-alive connections to the lock API.
type abuseFlood struct {
	mu      sync.Mutex
	conns   []net.Conn
	refused map[string]int
}

// abuseFloodResult is how the flood's connections were answered.
type abuseFloodResult struct {
	accepted int
	refused  map[string]int
}

func (f abuseFloodResult) text() string {
	return fmt.Sprintf("%d accepted, refused: %s", f.accepted, countsText(f.refused))
}

// openAbuseFlood opens n connections, 64 at a time, each sending one
// GET /locks (answered without the masters) and then staying idle.
// Dials and answers are bounded; so is the whole.
func openAbuseFlood(addr string, n int) *abuseFlood {
	f := &abuseFlood{refused: map[string]int{}}
	deadline := time.Now().Add(20 * time.Second)
	next := make(chan struct{})
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range next {
				f.add(openIdle(addr))
			}
		})
	}
	for range n {
		if time.Now().After(deadline) {
			break
		}
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return f
}

func (f *abuseFlood) add(c net.Conn, refusal string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c != nil {
		f.conns = append(f.conns, c)
		return
	}
	f.refused[refusal]++
}

func (f *abuseFlood) result() abuseFloodResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	return abuseFloodResult{accepted: len(f.conns), refused: f.refused}
}

func (f *abuseFlood) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// openIdle opens one connection and sends one request: the connection
// when the answer was 200, else how it was refused ("429 overloaded",
// "no answer: ...").
func openIdle(addr string) (net.Conn, string) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, "connect: " + abuseCause(err)
	}
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	res, err := writeAndRead(conn)
	if err != nil {
		conn.Close()
		return nil, "no answer: " + abuseCause(err)
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode == http.StatusOK && !res.Close {
		_ = conn.SetDeadline(time.Time{})
		return conn, ""
	}
	conn.Close()
	code := ""
	if _, rest, ok := strings.Cut(string(body), `"code":"`); ok {
		code, _, _ = strings.Cut(rest, `"`)
	}
	return nil, fmt.Sprintf("%d %s", res.StatusCode, code)
}

// abuseCause names a failed request: the API's code, or how the connection
// failed, which tells a listener that stopped accepting (timeout) from one
// that shed the connection (closed without an answer, reset).
func abuseCause(err error) string {
	var apiErr *client.Error
	var ne net.Error
	switch {
	case errors.As(err, &apiErr):
		return apiErr.Code
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), strings.Contains(err.Error(), "server closed idle connection"):
		return "closed without an answer"
	default:
		msg := err.Error()
		if len(msg) > 60 {
			msg = "…" + msg[len(msg)-60:]
		}
		return "other: " + msg
	}
}

func writeAndRead(conn net.Conn) (*http.Response, error) {
	if _, err := io.WriteString(conn, "GET /locks HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return nil, err
	}
	return http.ReadResponse(bufio.NewReader(conn), nil)
}

func burstsText(bursts []map[string]int) string {
	parts := make([]string, len(bursts))
	for i, b := range bursts {
		parts[i] = "[" + countsText(b) + "]"
	}
	return strings.Join(parts, " ")
}

// countsText lists counts by key, in key order ("none" when empty).
func countsText(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
