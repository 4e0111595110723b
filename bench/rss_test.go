package bench

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redistest"
)

// BenchmarkSidecarIdleRSS builds the real binary, starts it against three
// masters, waits until it is ready and idle, and reports its resident memory
// and the time from process start to /readyz 200.
func BenchmarkSidecarIdleRSS(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "sidelock")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "../cmd/sidelock")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	// Durable masters count at once; fresh ones without persistence would
	// sit out the restart probation (SIDELOCK_KEY_TTL), which is not start-up.
	servers := redistest.StartN(b, 3, redistest.WithAppendOnly())
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	var rssKB, heldKB, readyMS float64
	for b.Loop() {
		admin, api := freeAddr(b), freeAddr(b)
		cmd := exec.Command(bin)
		cmd.Env = []string{"SIDELOCK_REDIS_ADDRS=" + strings.Join(addrs, ","), "SIDELOCK_LISTEN_ADDR=" + api, "SIDELOCK_ADMIN_ADDR=" + admin, "SIDELOCK_LOG_LEVEL=warn"}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		for !ready("http://" + admin + "/readyz") {
			if time.Since(start) > 10*time.Second {
				b.Fatal("not ready within 10s")
			}
			time.Sleep(time.Millisecond)
		}
		readyMS = float64(time.Since(start).Microseconds()) / 1000
		time.Sleep(time.Second) // idle: a few health rounds
		rssKB = vmRSS(b, cmd.Process.Pid)
		holdMany(b, "http://"+api, heldLocks)
		time.Sleep(time.Second) // a few renewal rounds with every lock held
		heldKB = vmRSS(b, cmd.Process.Pid)
		cmd.Process.Kill()
		cmd.Wait()
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

func ready(url string) bool {
	res, err := http.Get(url)
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == 200
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

func freeAddr(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
