package bench

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// BenchmarkSidecarIdleRSS builds the real binary, starts it against three
// masters, waits until it is ready and idle, and reports its resident memory
// and the time from process start to /readyz 200.
func BenchmarkSidecarIdleRSS(b *testing.B) {
	bin := sidecarBinary(b)
	// Durable masters count at once; fresh ones without persistence would
	// sit out the restart probation (SIDELOCK_KEY_TTL), which is not start-up.
	servers := redistest.StartN(b, 3, redistest.WithAppendOnly())
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	var rssKB, heldKB, readyMS float64
	for b.Loop() {
		s := sidecartest.New(b, bin, sidecartest.Options{ReadyPoll: time.Millisecond})
		start := time.Now()
		if err := s.Launch(sidecarEnv(addrs, "warn")); err != nil {
			b.Fatal(err)
		}
		readyMS = float64(time.Since(start).Microseconds()) / 1000
		time.Sleep(measured(time.Second)) // idle: a few health rounds
		rssKB = vmRSS(b, s.Pid())
		holdMany(b, s.API(), heldLocks)
		time.Sleep(measured(time.Second)) // a few renewal rounds with every lock held
		heldKB = vmRSS(b, s.Pid())
		s.Kill()
	}
	b.ReportMetric(rssKB/1024, "idle-RSS-MB")
	b.ReportMetric(heldKB/1024, "10k-held-RSS-MB")
	b.ReportMetric(readyMS, "start-to-ready-ms")
	if st, err := os.Stat(bin); err == nil {
		b.ReportMetric(float64(st.Size())/(1<<20), "binary-MB")
	}
}

const heldLocks = 10000

// holdMany acquires n locks through the sidecar, 32 callers at a time.
func holdMany(b *testing.B, base string, n int) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	defer client.CloseIdleConnections() // its places under the connection cap are for what is measured next
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				for try := 0; ; try++ { // a busy machine may miss the node timeout
					if _, ok := tryAcquireHTTPQuiet(client, fmt.Sprintf("%s/locks/held/%d?ttl=1h", base, i)); ok || try == 5 {
						break
					}
				}
			}
		})
	}
	wg.Wait()
}

func vmRSS(b *testing.B, pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// BenchmarkSidecarRSSAtChartCaps runs the binary at the chart's caps (its
// defaults are the chart's: test/deploy checks they agree) filled to the
// worst case the formula in values.yaml covers — every connection a held
// lock's stream, the rest of SIDELOCK_MAX_LOCKS heartbeat leases — and
// fails if its resident memory reaches the chart's memory limit.
func BenchmarkSidecarRSSAtChartCaps(b *testing.B) {
	caps := chartSidecarCaps(b)
	bin := sidecarBinary(b)
	masters := durableMasterAddrs(b)
	var idleMB, fullMB float64
	for b.Loop() {
		s := startBinary(b, bin, masters)
		settle()
		idleMB = sample(b, s).rssKB / 1024
		streams := caps["maxConns"] - 8 // a few places for the heartbeat callers and the scrape
		holdMany(b, s.API(), caps["maxLocks"]-streams)
		run := strconv.FormatInt(time.Now().UnixNano(), 36)
		for i := range streams {
			connKinds["held"](b, s.APIAddr(), run, i)
		}
		settle()
		fullMB = sample(b, s).rssKB / 1024
		b.Logf("chart caps %v: idle %.1f MB, %d held streams + %d heartbeat leases %.1f MB, limit %d MiB",
			caps, idleMB, streams, caps["maxLocks"]-streams, fullMB, caps["limitMi"])
		if fullMB >= float64(caps["limitMi"]) {
			b.Errorf("RSS %.1f MB at the chart's caps reaches its %d MiB limit", fullMB, caps["limitMi"])
		}
	}
	b.ReportMetric(idleMB, "idle-RSS-MB")
	b.ReportMetric(fullMB, "at-caps-RSS-MB")
	b.ReportMetric(float64(caps["limitMi"]), "limit-MiB")
}

// chartSidecarCaps reads maxConns, maxLocks and the sidecar's memory
// limit (limitMi) from the chart's values.yaml (this module has no YAML
// parser; the lines are the chart's own, in a fixed shape).
func chartSidecarCaps(b *testing.B) map[string]int {
	raw, err := os.ReadFile(filepath.Join(repoRoot, "charts/sidelock/values.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	text := string(raw)
	caps := map[string]int{}
	for _, key := range []string{"maxConns", "maxLocks"} {
		_, rest, ok := strings.Cut(text, "\n    "+key+": ")
		n, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]))
		if !ok || err != nil {
			b.Fatalf("no sidecar.config.%s in values.yaml", key)
		}
		caps[key] = n
	}
	_, rest, _ := strings.Cut(text, "\n  resources:\n    requests:")
	_, rest, _ = strings.Cut(rest, "limits:\n      memory: ")
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), "Mi"))
	if err != nil {
		b.Fatalf("no sidecar.resources.limits.memory in Mi in values.yaml: %v", err)
	}
	caps["limitMi"] = n
	return caps
}
