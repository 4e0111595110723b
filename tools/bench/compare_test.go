package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// The reference: redsync v4, the standard Go Redlock library, linked into
// the caller and talking to the same masters through go-redis v9 pools.

func redsyncFor(b *testing.B, nodes []redlock.Node) *redsync.Redsync {
	pools := make([]redsyncredis.Pool, len(nodes))
	for i, n := range nodes {
		c := goredislib.NewClient(&goredislib.Options{Addr: n.Addr()})
		b.Cleanup(func() { c.Close() })
		pools[i] = goredis.NewPool(c)
	}
	return redsync.New(pools...)
}

// BenchmarkUncontended is one caller's acquire+release: sidelock over
// HTTP (fencing on, as shipped, and off) beside the floor program over
// HTTP (floor_test.go) and redsync in-process.
func BenchmarkUncontended(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		nodes := redisMasters(b, n)
		b.Run(fmt.Sprintf("masters=%d/sidelock", n), func(b *testing.B) { uncontendedHTTP(b, tcpClient(), newSidecar(b, nodes).URL) })
		b.Run(fmt.Sprintf("masters=%d/sidelock-nofence", n), func(b *testing.B) {
			uncontendedHTTP(b, tcpClient(), newSidecarFencing(b, nodes, false).URL)
		})
		if n == 3 {
			b.Run(fmt.Sprintf("masters=%d/sidelock-unix", n), func(b *testing.B) {
				client, base := newUnixSidecar(b, nodes)
				uncontendedHTTP(b, client, base)
			})
		}
		b.Run(fmt.Sprintf("masters=%d/floor", n), func(b *testing.B) { uncontendedHTTP(b, tcpClient(), newFloor(b, nodes).URL) })
		if n == 3 {
			// The platform below the floor: its HTTP exchange alone, its Redis calls alone.
			b.Run("masters=3/nethttp", func(b *testing.B) { uncontendedHTTP(b, tcpClient(), newHTTPOnly(b).URL) })
			b.Run("masters=3/goredis", func(b *testing.B) { goredisPairs(b, nodes) })
			b.Run("masters=3/floor-release-after", func(b *testing.B) {
				uncontendedHTTP(b, tcpClient(), newFloorReleasingAfter(b, nodes).URL)
			})
		}
		b.Run(fmt.Sprintf("masters=%d/redsync", n), func(b *testing.B) {
			rs := redsyncFor(b, nodes)
			redsyncPairs(b, func(i int) *redsync.Mutex {
				return rs.NewMutex(fmt.Sprintf("rs/%d", i%1024), redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
			})
		})
	}
}

// redsyncPairs locks and unlocks mutex(i) for each iteration i and
// reports the pairs' latencies.
func redsyncPairs(b *testing.B, mutex func(i int) *redsync.Mutex) {
	lat := make(latencies, 0, b.N)
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		m := mutex(i)
		if err := m.Lock(); err != nil {
			b.Fatal(err)
		}
		if _, err := m.Unlock(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	lat.report(b)
}

func tcpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
}

func uncontendedHTTP(b *testing.B, client *http.Client, base string) {
	lat := make(latencies, 0, b.N)
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if pairHTTP(b, client, base, fmt.Sprintf("un/%d", i%1024)) {
			lat = append(lat, time.Since(start))
		}
	}
	lat.report(b)
	reportErrors(b)
}

// BenchmarkThroughput is acquire+release pairs per second with 16 and 64
// concurrent callers on distinct names.
func BenchmarkThroughput(b *testing.B) {
	for _, n := range []int{1, 3} {
		nodes := redisMasters(b, n)
		srv := newSidecar(b, nodes)
		floorSrv := newFloor(b, nodes)
		rs := redsyncFor(b, nodes)
		for _, callers := range []int{16, 64} {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: callers}}
			b.Run(fmt.Sprintf("masters=%d/callers=%d/sidelock", n, callers), func(b *testing.B) {
				parallelPairs(b, nodes, callers, func(worker, i int) {
					pairHTTP(b, client, srv.URL, fmt.Sprintf("tp/%d/%d", worker, i%64))
				})
				reportErrors(b)
			})
			b.Run(fmt.Sprintf("masters=%d/callers=%d/floor", n, callers), func(b *testing.B) {
				parallelPairs(b, nodes, callers, func(worker, i int) {
					pairHTTP(b, client, floorSrv.URL, fmt.Sprintf("tp/%d/%d", worker, i%64))
				})
				reportErrors(b)
			})
			b.Run(fmt.Sprintf("masters=%d/callers=%d/redsync", n, callers), func(b *testing.B) {
				parallelPairs(b, nodes, callers, func(worker, i int) {
					m := rs.NewMutex(fmt.Sprintf("rstp/%d/%d", worker, i%64), redsync.WithExpiry(10*time.Second), redsync.WithTries(1))
					if err := m.Lock(); err != nil {
						b.Fatal(err)
					}
					if _, err := m.Unlock(); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
	}
}

// parallelPairs runs b.N pairs over a fixed number of callers and reports
// pairs per second, and the masters' CPU per pair (INFO cpu, summed).
func parallelPairs(b *testing.B, nodes []redlock.Node, callers int, pair func(worker, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	redis0 := redisCPUSeconds(b, nodes)
	b.ResetTimer()
	start := time.Now()
	for w := range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > b.N {
					return
				}
				pair(w, i)
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
	b.StopTimer()
	b.ReportMetric((redisCPUSeconds(b, nodes)-redis0)*1e6/float64(b.N), "redis-cpu-µs/pair")
}

// cpuSeconds is this process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// redisCPUSeconds sums used_cpu_user+used_cpu_sys over the masters.
func redisCPUSeconds(b *testing.B, nodes []redlock.Node) float64 {
	var total float64
	for _, n := range nodes {
		c := goredislib.NewClient(&goredislib.Options{Addr: n.Addr()})
		info, err := c.Info(context.Background(), "cpu").Result()
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			k, v, _ := strings.Cut(strings.TrimSpace(sc.Text()), ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return total
}

// renewalCounter counts successful renewals.
type renewalCounter struct{ ok atomic.Int64 }

func (c *renewalCounter) Acquisition(lease.Outcome, time.Duration) {}
func (c *renewalCounter) Waited(lease.Outcome, time.Duration)      {}
func (c *renewalCounter) Wakeup(lease.WakeSource)                  {}
func (c *renewalCounter) Ended(lease.EndReason)                    {}
func (c *renewalCounter) Renewal(ok bool) {
	if ok {
		c.ok.Add(1)
	}
}

// BenchmarkRenewal holds 1k and 10k locks on three masters and measures
// the CPU (this process plus the masters) spent per renewed lock: sidelock's
// background renewal beside redsync's Extend of each mutex. One iteration
// is one renewal window of 2s.
func BenchmarkRenewal(b *testing.B) {
	for _, held := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("locks=%d/sidelock", held), func(b *testing.B) { renewSidelock(b, held) })
		b.Run(fmt.Sprintf("locks=%d/redsync-extend", held), func(b *testing.B) { renewRedsync(b, held) })
	}
}

// renewalWindow is not cut by -short (measured): a shorter one may hold no renewal round.
const renewalWindow = 2 * time.Second

func renewSidelock(b *testing.B, held int) {
	nodes := redisMasters(b, 3)
	counter := &renewalCounter{}
	// A 1.5s key ttl renews every 0.5s: four rounds per window per lock.
	m := inprocess.Start(b, inprocess.Options{Nodes: nodes, Config: func(c *config.Config) {
		c.KeyPrefix, c.NodeTimeout, c.KeyTTL, c.DefaultTTL = "renew:", benchNodeTimeout, 1500*time.Millisecond, time.Hour
		c.MaxLocks, c.MaxWaiters = lease.DefaultMaxLocks, lease.DefaultMaxWaiters // the lease package's, not the chart's
	}, Sidecar: []sidecar.Option{sidecar.WithLeaseObserver(func(lease.Observer) lease.Observer { return counter })}}).Leases()
	acquireMany(b, held, func(i int) error {
		_, err := m.Acquire(context.Background(), lease.Request{Name: fmt.Sprintf("held/%d", i)})
		return err
	})
	measureRenewals(b, nodes, func() int64 { return counter.ok.Load() }, func(stop <-chan struct{}) { <-stop })
}

func renewRedsync(b *testing.B, held int) {
	nodes := redisMasters(b, 3)
	rs := redsyncFor(b, nodes)
	mutexes := make([]*redsync.Mutex, held)
	acquireMany(b, held, func(i int) error {
		mutexes[i] = rs.NewMutex(fmt.Sprintf("held/%d", i), redsync.WithExpiry(time.Hour), redsync.WithTries(1))
		return mutexes[i].Lock()
	})
	var extends atomic.Int64
	measureRenewals(b, nodes, extends.Load, func(stop <-chan struct{}) {
		// Extend every mutex, 16 at a time, as fast as it goes (the
		// library has no batching); the count is what got done.
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := w; ; i = (i + 16) % held {
					select {
					case <-stop:
						return
					default:
					}
					if ok, err := mutexes[i].Extend(); ok && err == nil {
						extends.Add(1)
					}
				}
			})
		}
		wg.Wait()
	})
}

// acquireMany takes n locks, 32 at a time. A sidecar that says it is
// overloaded (a starved machine could not send the calls in time) is
// answered as a caller should: back off and ask again, a bounded number
// of times.
func acquireMany(b *testing.B, n int, acquire func(i int) error) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := retryOn(lease.ErrOverloaded, func() error { return acquire(i) }); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// retryOn calls op again while it fails with target, as a caller backs
// off an answer that says "later" (overloaded, no quorum on a starved
// machine): at most retryTries times, retryBackoff apart, far beyond a
// starved moment.
func retryOn(target error, op func() error) error {
	err := op()
	for try := 0; errors.Is(err, target) && try < retryTries; try++ {
		time.Sleep(retryBackoff)
		err = op()
	}
	return err
}

const (
	retryTries   = 100
	retryBackoff = 50 * time.Millisecond
)

// measureRenewals runs work for b.N windows and reports CPU µs per renewal.
func measureRenewals(b *testing.B, nodes []redlock.Node, renewals func() int64, work func(stop <-chan struct{})) {
	b.ResetTimer()
	cpu0, redis0, count0 := cpuSeconds(), redisCPUSeconds(b, nodes), renewals()
	for range b.N {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { work(stop); close(done) }()
		time.Sleep(renewalWindow)
		close(stop)
		<-done
	}
	cpu, redisCPU, count := cpuSeconds()-cpu0, redisCPUSeconds(b, nodes)-redis0, renewals()-count0
	if count == 0 {
		b.Fatal("no renewals")
	}
	b.ReportMetric((cpu+redisCPU)*1e6/float64(count), "cpu-µs/renewal")
	b.ReportMetric(cpu*1e6/float64(count), "sidecar-cpu-µs/renewal")
	b.ReportMetric(float64(count)/(float64(b.N)*renewalWindow.Seconds()), "renewals/s")
}
