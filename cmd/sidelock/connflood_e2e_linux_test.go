package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	assembly "github.com/sidelock/sidelock/internal/sidecar" // the package; cmd/sidelock's tests have a type sidecar
)

// Issue 14, item 2: one client opening idle connections exhausted the
// sidecar's descriptors, /healthz failed for ~47 s (the kubelet would have
// restarted the sidecar and dropped every lock) and heartbeats timed out.
// Here the sidecar runs with SIDELOCK_MAX_CONNS=200 and an open-file limit
// of exactly what its budget claims (200 + the reserve), and one client
// keeps 400 silent connections open against it for a few seconds. The
// admin listener keeps answering, a heartbeat lease keeps extending, a held
// lock's stream and 100 event streams are never shed, the silent
// connections are shed and counted, and once every place is busy in a
// request a newcomer is answered 429 overloaded, counted too.
func TestE2EConnectionFloodSparesProbesLeasesAndStreams(t *testing.T) {
	const (
		maxConns = 200
		watchers = 100
		flood    = 2 * maxConns
		floodFor = 4 * time.Second
	)
	masters := durableMasters(t, 3)
	s := startSidecar(t, masters, fmt.Sprintf("SIDELOCK_MAX_CONNS=%d", maxConns), "SIDELOCK_KEY_TTL=3s", "SIDELOCK_LOG_LEVEL=info")
	eventually(t, 10*time.Second, "sidecar ready", func() bool { return s.readyz(t) == 200 })
	limitOpenFiles(t, s.Pid(), uint64(maxConns+assembly.FDReserve(2, len(masters))))
	api := strings.TrimPrefix(s.api, "http://")

	token := s.acquire(t, "/locks/flood/heartbeat?ttl=30s")
	held := openStream(t, api, "POST /locks/flood/held?hold=true HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	held.waitEvent(t, "acquired")
	streams := []*stream{held}
	for range watchers {
		streams = append(streams, openStream(t, api, watchRequest(token)))
	}

	probes := startProbes(s.admin + "/healthz")
	beats := startHeartbeats(s.api+"/locks/flood/heartbeat", token)
	floodSilently(t, api, flood, floodFor)
	beats.stop()
	for i, st := range streams {
		st.waitEvent(t, "renewed") // alive and served after the flood
		if t.Failed() {
			t.Fatalf("stream %d (0: the held lock) did not survive the flood", i)
		}
	}
	// The excess was shed (once silent long enough to judge) or refused
	// as overload, never left open past the cap.
	shed, refusedInFlood := overloadCount(t, s, "shed_new"), overloadCount(t, s, "refused")
	if floor := float64(flood - maxConns); shed == 0 || shed+refusedInFlood < floor {
		t.Errorf("shed_new = %v, refused = %v after %d silent connections at a cap of %d, want some shed and at least %v in all",
			shed, refusedInFlood, flood, maxConns, floor)
	}

	// Every place busy in a request: newcomers are answered 429 overloaded.
	refusals := saturate(t, api, token, maxConns+50, 5)
	if got := overloadCount(t, s, "refused") - refusedInFlood; got < float64(refusals) {
		t.Errorf("refused = %v, want at least the %d refusals seen", got, refusals)
	}
	probes.stop()
	held.waitEvent(t, "renewed")
	beats.report(t)
	probes.report(t)
	// The heartbeat lease outlived the saturation.
	eventually(t, 10*time.Second, "places free again", func() bool {
		return masterSeries(t, s, "sidelock_connections_open")[`sidelock_connections_open{listener="api"}`] < maxConns
	})
	if code, body := s.do(t, "PUT", "/locks/flood/heartbeat", token); code != 200 {
		t.Errorf("heartbeat after the flood: %d %v", code, body)
	}
	t.Logf("shed %v silent connections, refused %d newcomers at the cap", shed, refusals)
}

// limitOpenFiles lowers a running process's RLIMIT_NOFILE (prlimit), so
// a flood meets the limit the budget was computed against, without the
// test process opening thousands of descriptors itself.
func limitOpenFiles(t *testing.T, pid int, n uint64) {
	t.Helper()
	lim := syscall.Rlimit{Cur: n, Max: n}
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_NOFILE,
		uintptr(unsafe.Pointer(&lim)), 0, 0, 0); errno != 0 {
		t.Fatalf("prlimit %d: %v", pid, errno)
	}
}

func watchRequest(token string) string {
	return "GET /locks/flood/heartbeat/events HTTP/1.1\r\nHost: x\r\nLock-Token: " + token + "\r\n\r\n"
}

// stream is one event stream read over its own connection.
type stream struct {
	c    net.Conn
	body *bufio.Reader
}

func openStream(t *testing.T, addr, request string) *stream {
	t.Helper()
	st, res := sendRaw(t, addr, request)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("stream %q: %d", strings.SplitN(request, "\r\n", 2)[0], res.StatusCode)
	}
	return st
}

// sendRaw sends request on a new connection and reads the answer's head.
func sendRaw(t *testing.T, addr, request string) (*stream, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", strings.SplitN(request, "\r\n", 2)[0], err)
	}
	_ = c.SetDeadline(time.Time{})
	return &stream{c: c, body: bufio.NewReader(res.Body)}, res
}

// waitEvent reads the stream until an event of that name, within 10s.
func (st *stream) waitEvent(t *testing.T, name string) {
	t.Helper()
	_ = st.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = st.c.SetReadDeadline(time.Time{}) }()
	for range 1000 {
		line, err := st.body.ReadString('\n')
		if err != nil {
			t.Errorf("waiting for %q: %v", name, err)
			return
		}
		if line == "event: "+name+"\n" {
			return
		}
	}
	t.Errorf("no %q event in 1000 lines", name)
}

// floodSilently keeps n connections open that never send a byte, for d,
// dialling again whenever the sidecar closes one.
func floodSilently(t *testing.T, addr string, n int, d time.Duration) {
	t.Helper()
	closed := make(chan struct{}, n)
	dialOne := func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Errorf("flood dial: %v", err)
			return
		}
		t.Cleanup(func() { c.Close() })
		go func() {
			_, _ = io.Copy(io.Discard, c) // returns when the sidecar closes it
			closed <- struct{}{}
		}()
	}
	for range n {
		dialOne()
	}
	end := time.After(d)
	for i := 0; i < 2*n; i++ { // bounded: two redials per connection, so the flood does not starve other tests of CPU
		select {
		case <-end:
			return
		case <-closed:
			time.Sleep(5 * time.Millisecond) // a flood that lasts, not one burned in the first instant
			dialOne()
		}
	}
	<-end // the connections stay open until then
}

// saturate opens event streams until want newcomers were answered 429
// overloaded (at most attempts tries), checking each refusal's shape, then
// closes the streams it opened; it returns how many refusals there were.
func saturate(t *testing.T, addr, token string, attempts, want int) int {
	t.Helper()
	refused := 0
	var opened []net.Conn
	defer func() {
		for _, c := range opened {
			c.Close()
		}
	}()
	for i := 0; i < attempts && refused < want; i++ {
		st, res := sendRaw(t, addr, watchRequest(token))
		if res.StatusCode == http.StatusOK {
			opened = append(opened, st.c) // a place was free: it is busy now
			continue
		}
		var body struct{ Code string }
		_ = json.NewDecoder(st.body).Decode(&body)
		if res.StatusCode != http.StatusTooManyRequests || body.Code != "overloaded" || res.Header.Get("Retry-After") == "" {
			t.Errorf("newcomer at the cap: %d %+v Retry-After %q; want 429 overloaded with Retry-After", res.StatusCode, body, res.Header.Get("Retry-After"))
			return refused
		}
		refused++
	}
	if refused < want {
		t.Errorf("%d refusals in %d connections at a cap of fewer", refused, attempts)
	}
	return refused
}

func overloadCount(t *testing.T, s *sidecar, action string) float64 {
	t.Helper()
	series := masterSeries(t, s, "sidelock_connections_overload_total")
	v, ok := series[fmt.Sprintf(`sidelock_connections_overload_total{action=%q,listener="api"}`, action)]
	if !ok {
		t.Errorf("no sidelock_connections_overload_total for action %q in %v", action, series)
	}
	return v
}

// repeater runs a check every period until stopped, keeping the failures.
type repeater struct {
	name     string
	done     chan struct{}
	finished sync.WaitGroup
	mu       sync.Mutex
	runs     int
	failures []string
	slowest  time.Duration
}

func repeat(name string, period time.Duration, check func() error) *repeater {
	r := &repeater{name: name, done: make(chan struct{})}
	r.finished.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for range 10000 { // bounded; stop ends it long before
			start := time.Now()
			err := check()
			r.mu.Lock()
			r.runs++
			r.slowest = max(r.slowest, time.Since(start))
			if err != nil {
				r.failures = append(r.failures, fmt.Sprintf("at %v: %v", start.Format(time.TimeOnly), err))
			}
			r.mu.Unlock()
			select {
			case <-r.done:
				return
			case <-tick.C:
			}
		}
	})
	return r
}

func (r *repeater) stop() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	r.finished.Wait()
}

func (r *repeater) report(t *testing.T) {
	t.Helper()
	r.stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Logf("%s: %d runs, %d failed, slowest %v", r.name, r.runs, len(r.failures), r.slowest)
	if len(r.failures) > 0 || r.runs < 5 {
		t.Errorf("%s failed %d of %d times: %v", r.name, len(r.failures), r.runs, r.failures)
	}
}

// startProbes probes like the kubelet: a new connection each time, and a
// failure when no 200 has come within its 1s timeout.
func startProbes(url string) *repeater {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return repeat("/healthz probes", 100*time.Millisecond, func() error {
		res, err := client.Get(url)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	})
}

// startHeartbeats extends the lease every 200ms over a keep-alive
// connection, as a heartbeating client does.
func startHeartbeats(url, token string) *repeater {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	return repeat("heartbeats", 200*time.Millisecond, func() error {
		req, _ := http.NewRequest(http.MethodPut, url, nil)
		req.Header.Set("Lock-Token", token)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("status %d", res.StatusCode)
		}
		return nil
	})
}
