package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// Memory per connection, measured on the real binary (issue 14, item 3).
// Each kind of connection is opened n times against a fresh sidecar, and
// the growth of its resident memory, heap in use and goroutine stacks
// (from its own /metrics) is divided by n:
//
//   - idle: a keep-alive connection that made one request and sits idle;
//   - held: a lock held for as long as its connection lives (?hold=true);
//   - waiter: a POST ?wait=5m queued behind a held lock.

// repoRoot is the product's module, from this package's directory (the
// go test working directory) in the tools module.
const repoRoot = "../.."

// sidecarBinary builds the sidecar as shipped (static, stripped).
func sidecarBinary(b *testing.B) string {
	b.Helper()
	return sidecartest.Build(b, "-trimpath", "-ldflags", "-s -w")
}

// startBinary starts bin over the masters with env on top of the shipped
// defaults and waits until it is ready (sidecartest: free ports, again if
// one was taken before the sidecar bound it; its log when it fails).
func startBinary(b *testing.B, bin string, masters []string, env ...string) *sidecartest.Process {
	b.Helper()
	return sidecartest.Start(b, bin, sidecarEnv(masters, "error", env...), sidecartest.Options{})
}

// sidecarEnv is the whole environment of a benchmarked sidecar.
func sidecarEnv(masters []string, logLevel string, env ...string) []string {
	return append([]string{"SIDELOCK_REDIS_ADDRS=" + strings.Join(masters, ","), "SIDELOCK_LOG_LEVEL=" + logLevel}, env...)
}

// memSample is what a sidecar uses at one moment.
type memSample struct {
	rssKB, heapKB, stackKB, goroutines float64
}

func sample(b *testing.B, s *sidecartest.Process) memSample {
	b.Helper()
	m := scrape(b, s.Admin()+"/metrics")
	return memSample{rssKB: vmRSS(b, s.Pid()), heapKB: m["go_memstats_heap_inuse_bytes"] / 1024,
		stackKB: m["go_memstats_stack_inuse_bytes"] / 1024, goroutines: m["go_goroutines"]}
}

// settle lets renewals and GC cycles run, so stacks shrink and the heap
// holds what is live plus the collector's headroom, as it would in a pod.
func settle() { time.Sleep(measured(3 * time.Second)) }

// perUnit is the growth from before to after, per connection.
func perUnit(before, after memSample, n int) memSample {
	d := float64(n)
	return memSample{rssKB: (after.rssKB - before.rssKB) / d, heapKB: (after.heapKB - before.heapKB) / d,
		stackKB: (after.stackKB - before.stackKB) / d, goroutines: (after.goroutines - before.goroutines) / d}
}

func scrape(b *testing.B, url string) map[string]float64 {
	b.Helper()
	res, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := map[string]float64{}
	for line := range strings.Lines(string(raw)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if f, err := strconv.ParseFloat(value, 64); ok && err == nil && !strings.HasPrefix(name, "#") {
			out[name] = f
		}
	}
	return out
}

// rawStream sends request on a new connection and reads until the
// answer's head and the first line of its body: the connection is then
// in the state measured (idle, holding, waiting).
func openConn(b *testing.B, addr, request string, expectBody bool) net.Conn {
	b.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, request); err != nil {
		b.Fatal(err)
	}
	if !expectBody {
		return c
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("%q: %v %v", strings.SplitN(request, "\r\n", 2)[0], res, err)
	}
	_, _ = bufio.NewReader(res.Body).ReadString('\n')
	_ = c.SetReadDeadline(time.Time{})
	return c
}

// connKinds open one connection of each measured kind; i numbers it, and
// run makes its lock names this run's own: a stopped sidecar leaves its
// held keys to lapse, so the next run on the same masters must not meet them.
var connKinds = map[string]func(b *testing.B, api, run string, i int){
	"idle": func(b *testing.B, api, run string, i int) {
		openConn(b, api, "GET /locks HTTP/1.1\r\nHost: x\r\n\r\n", true)
	},
	"held": func(b *testing.B, api, run string, i int) {
		openConn(b, api, fmt.Sprintf("POST /locks/stream/%s/%d?hold=true HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", run, i), true)
	},
	"waiter": func(b *testing.B, api, run string, i int) {
		// Spread over names, as no one name may take every waiting slot.
		name := fmt.Sprintf("contended/%s/%d", run, i%contendedNames)
		if i < contendedNames { // the holder its waiters queue behind
			openConn(b, api, "POST /locks/"+name+"?hold=true HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", true)
		}
		openConn(b, api, "POST /locks/"+name+"?wait=5m HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", false)
	},
}

// contendedNames are the held locks the waiters queue behind.
const contendedNames = 16

// BenchmarkSidecarMemoryPerConnection reports, per connection of each
// kind, the sidecar's growth in RSS, heap in use and stack in use.
func BenchmarkSidecarMemoryPerConnection(b *testing.B) {
	bin := sidecarBinary(b)
	masters := durableMasterAddrs(b)
	n := perConnN()
	for _, kind := range []string{"idle", "held", "waiter"} {
		b.Run(kind, func(b *testing.B) {
			var u memSample
			for b.Loop() {
				s := startBinary(b, bin, masters, fmt.Sprintf("SIDELOCK_MAX_CONNS=%d", n+16), fmt.Sprintf("SIDELOCK_MAX_WAITERS=%d", n+16))
				settle()
				before := sample(b, s)
				run := strconv.FormatInt(time.Now().UnixNano(), 36)
				for i := range n {
					connKinds[kind](b, s.APIAddr(), run, i)
				}
				if kind == "waiter" {
					waitFor(b, s, "sidelock_waiters", float64(n))
				}
				settle()
				u = perUnit(before, sample(b, s), n)
			}
			b.ReportMetric(u.rssKB, "RSS-KB/conn")
			b.ReportMetric(u.heapKB, "heap-KB/conn")
			b.ReportMetric(u.stackKB, "stack-KB/conn")
			b.ReportMetric(u.goroutines, "goroutines/conn")
		})
	}
}

// perConnN is how many connections of a kind are opened: 1000, or
// SIDELOCK_BENCH_CONNS.
func perConnN() int {
	if n, err := strconv.Atoi(os.Getenv("SIDELOCK_BENCH_CONNS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

func durableMasterAddrs(b *testing.B) []string {
	servers := redistest.StartN(b, 3, redistest.WithAppendOnly())
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// waitFor waits until a metric of the sidecar reaches want.
func waitFor(b *testing.B, s *sidecartest.Process, metric string, want float64) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for scrape(b, s.Admin()+"/metrics")[metric] < want {
		if time.Now().After(deadline) {
			b.Fatalf("%s below %v after 30s", metric, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
