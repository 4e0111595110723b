package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sidelock/sidelock/httpapi"
	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/internal/sidecar/inprocess"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// statusBench is what the status provocations run against: sidecars over
// in-memory masters that can be taken down, each behind the HTTP server
// the sidecar really runs (its header limit answers 431).
type statusBench struct {
	t     *testing.T
	nodes []*memnode.Node
}

func newStatusBench(t *testing.T) *statusBench {
	return &statusBench{t: t, nodes: []*memnode.Node{memnode.New("a"), memnode.New("b"), memnode.New("c")}}
}

// manager is a sidecar over the bench's masters, assembled in process;
// cfg adds the lease manager's limits, watchers caps the watch streams
// (0: the default).
func (b *statusBench) manager(cfg lease.Config, watchers ...int) *sidecar.Core {
	nodes := make([]redlock.Node, len(b.nodes))
	for i, n := range b.nodes {
		nodes[i] = n
	}
	return inprocess.Start(b.t, inprocess.Options{Nodes: nodes, Config: func(c *config.Config) {
		c.KeyPrefix, c.MaxWait = "s:", time.Minute
		if len(watchers) > 0 {
			c.MaxWatchers = watchers[0]
		}
	}, Sidecar: []sidecar.Option{sidecar.WithLeaseTuning(func(lc *lease.Config) {
		lc.MaxLocks, lc.MaxWaiters, lc.MaxWaitersPerName = cfg.MaxLocks, cfg.MaxWaiters, cfg.MaxWaitersPerName
	})}})
}

// serve runs h behind the sidecar's own http.Server settings.
func (b *statusBench) serve(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config = sidecar.NewHTTPServer(h, discardLogger())
	srv.Start()
	b.t.Cleanup(srv.Close)
	return srv
}

func (b *statusBench) api(core *sidecar.Core, opts ...httpapi.Option) *httptest.Server {
	return b.serve(core.Handler(opts...))
}

// answer sends one request and returns its status once the headers are
// in (a stream is then closed), checking that a problem's type is its
// code's.
func answer(t *testing.T, srv *httptest.Server, method, path, body string, header ...string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	if res.Header.Get("Content-Type") == "application/problem+json" {
		var p struct{ Type, Code string }
		if err := json.NewDecoder(res.Body).Decode(&p); err != nil || p.Code == "" || !strings.HasSuffix(p.Type, "#"+p.Code) {
			t.Errorf("%s %s: problem type %q for code %q (%v)", method, path, p.Type, p.Code, err)
		}
	}
	return res.StatusCode
}

// acquireToken takes the lock name on srv and returns the token.
func acquireToken(t *testing.T, srv *httptest.Server, name string) string {
	t.Helper()
	return takeToken(t, srv, "/locks/"+name)
}

// takeToken POSTs to path (a lock's or a semaphore's) and returns the
// token of the lease granted.
func takeToken(t *testing.T, srv *httptest.Server, path string) string {
	t.Helper()
	res, err := srv.Client().Post(srv.URL+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var l struct{ Token string }
	if err := json.NewDecoder(res.Body).Decode(&l); err != nil || res.StatusCode != 200 {
		t.Fatalf("acquiring %s: %d %v", path, res.StatusCode, err)
	}
	return l.Token
}

// fixedReadiness is a Readiness that reports ready or not.
type fixedReadiness bool

func (r fixedReadiness) Report() health.Report { return health.Report{Ready: bool(r)} }

// failingCollector makes the Prometheus handler fail to gather.
type failingCollector struct{ desc *prometheus.Desc }

func (c failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c failingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(c.desc, errors.New("collection failed"))
}

const zeroToken = "00000000000000000000000000000000"

// Every status the spec lists for an operation is one its handlers
// answer, and every status they can answer is listed: each documented
// status is provoked here for real (through the sidecar's own HTTP server
// settings), and the statuses provoked per operation must equal the spec's.
// 500 is provoked by a nil Manager or Readiness (a panic the recoverer
// answers), 431 by headers over the sidecar's limit. A status the handlers
// can answer but nothing here provokes is the one gap left: add its
// provocation with its response. The few documented statuses no request
// can provoke here are in notProvokedHere, each with the reason.
func TestOperationStatusesAreTheOnesServed(t *testing.T) {
	b := newStatusBench(t)
	m := b.manager(lease.Config{})
	api := b.api(m)
	framing := b.api(m, httpapi.WithFramingCheck(func(string) bool { return true }))
	guarded := b.api(m, httpapi.WithAPIToken("status-test-api-token"))
	broken := b.serve(httpapi.NewServer(discardLogger(), nil, nil))
	limited := b.api(b.manager(lease.Config{MaxLocks: 1}))
	acquireToken(t, limited, "limit/first")
	downNodes := newStatusBench(t)
	down := downNodes.api(downNodes.manager(lease.Config{}))
	for _, n := range downNodes.nodes {
		n.SetDown(true)
	}
	bigHeader := []string{"X-Big", strings.Repeat("h", 64<<10)}
	bigBody := `{"owner":"` + strings.Repeat("o", 70<<10) + `"}`
	held := acquireToken(t, api, "status/held")
	semHeld := takeToken(t, api, "/semaphores/status/held?permits=1")
	rwHeld := takeToken(t, api, "/rwlocks/status/held?mode=shared")
	setHeld := takeToken(t, api, "/locksets/status/set/a,status/set/b")
	capped := watchCappedAtOne(t, b)
	idem := []string{"Idempotency-Key", "status-test-idempotency-key"}
	if got := answer(t, api, "POST", "/locks/status/idem?ttl=30s", "", idem...); got != 200 {
		t.Fatalf("idempotent acquire: %d", got)
	}
	if got := answer(t, api, "POST", "/semaphores/status/idem?permits=2&ttl=30s", "", idem...); got != 200 {
		t.Fatalf("idempotent permit: %d", got)
	}
	if got := answer(t, api, "POST", "/rwlocks/status/idem?mode=shared&ttl=30s", "", idem...); got != 200 {
		t.Fatalf("idempotent reader: %d", got)
	}
	if got := answer(t, api, "POST", "/locksets/status/idem/a,status/idem/b?ttl=30s", "", idem...); got != 200 {
		t.Fatalf("idempotent lock set: %d", got)
	}

	metricsOK := promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{})
	failing := prometheus.NewRegistry()
	failing.MustRegister(failingCollector{prometheus.NewDesc("status_test_failing", "fails", nil, nil)})
	admin := b.serve(httpapi.NewAdminServer(discardLogger(), fixedReadiness(true), metricsOK))
	notReady := b.serve(httpapi.NewAdminServer(discardLogger(), fixedReadiness(false), metricsOK))
	adminBroken := b.serve(httpapi.NewAdminServer(discardLogger(), nil, promhttp.HandlerFor(failing, promhttp.HandlerOpts{})))

	type provocation struct {
		status int
		do     func() int
	}
	req := func(srv *httptest.Server, method, path, body string, header ...string) func() int {
		return func() int { return answer(t, srv, method, path, body, header...) }
	}
	tok := func(token string) []string { return []string{"Lock-Token", token} }
	ops := map[string][]provocation{
		"get /locks": {
			{200, req(api, "GET", "/locks", "")},
			{400, req(framing, "GET", "/locks", "")},
			{401, req(guarded, "GET", "/locks", "")},
			{431, req(api, "GET", "/locks", "", bigHeader...)},
			{500, req(broken, "GET", "/locks", "")},
		},
		"post /locks/{name}": {
			{200, req(api, "POST", "/locks/status/free", "")},
			{204, req(api, "POST", "/locks/status/reconnect?hold=true", "", "Last-Event-ID", "3")},
			{400, req(api, "POST", "/locks/status/x?ttl=soon", "")},
			{401, req(guarded, "POST", "/locks/status/x", "")},
			{409, req(api, "POST", "/locks/status/held", "")},
			{413, req(api, "POST", "/locks/status/x", bigBody)},
			{422, req(api, "POST", "/locks/status/idem?ttl=31s", "", idem...)},
			{429, req(limited, "POST", "/locks/limit/second", "")},
			{431, req(api, "POST", "/locks/status/x", "", bigHeader...)},
			{500, req(broken, "POST", "/locks/status/x", "")},
			{503, req(down, "POST", "/locks/status/x", "")},
		},
		"put /locks/{name}": {
			{200, req(api, "PUT", "/locks/status/held", "", tok(held)...)},
			{400, req(api, "PUT", "/locks/status/held", "")},
			{401, req(guarded, "PUT", "/locks/status/held", "", tok(held)...)},
			{410, req(api, "PUT", "/locks/status/held", "", tok(zeroToken)...)},
			{413, req(api, "PUT", "/locks/status/held", bigBody, tok(held)...)},
			{431, req(api, "PUT", "/locks/status/held", "", append(tok(held), bigHeader...)...)},
			{500, req(broken, "PUT", "/locks/status/held", "", tok(zeroToken)...)},
		},
		"delete /locks/{name}": {
			{204, func() int {
				return answer(t, api, "DELETE", "/locks/status/gone", "", tok(acquireToken(t, api, "status/gone"))...)
			}},
			{400, req(api, "DELETE", "/locks/status/held", "")},
			{401, req(guarded, "DELETE", "/locks/status/held", "", tok(held)...)},
			{410, req(api, "DELETE", "/locks/status/held", "", tok(zeroToken)...)},
			{413, req(api, "DELETE", "/locks/status/held", bigBody, tok(zeroToken)...)},
			{431, req(api, "DELETE", "/locks/status/held", "", append(tok(zeroToken), bigHeader...)...)},
			{500, req(broken, "DELETE", "/locks/status/held", "", tok(zeroToken)...)},
		},
		"get /locks/{name}": {
			{200, req(api, "GET", "/locks/status/held", "")},
			{400, req(api, "GET", "/locks/status/held?x=1", "")},
			{401, req(guarded, "GET", "/locks/status/held", "")},
			{429, req(capped, "GET", "/locks/status/held?watch=true", "")},
			{431, req(api, "GET", "/locks/status/held", "", bigHeader...)},
			{500, req(broken, "GET", "/locks/status/held", "")},
			{503, req(down, "GET", "/locks/status/held", "")},
		},
		"get /locks/{name}/events": {
			{200, req(api, "GET", "/locks/status/held/events", "", tok(held)...)},
			{204, req(api, "GET", "/locks/status/held/events", "", append(tok(zeroToken), "Last-Event-ID", "2")...)},
			{400, req(api, "GET", "/locks/status/held/events", "")},
			{401, req(guarded, "GET", "/locks/status/held/events", "", tok(held)...)},
			{410, req(api, "GET", "/locks/status/held/events", "", tok(zeroToken)...)},
			{413, req(api, "GET", "/locks/status/held/events", bigBody, tok(zeroToken)...)},
			{431, req(api, "GET", "/locks/status/held/events", "", append(tok(held), bigHeader...)...)},
			{500, req(broken, "GET", "/locks/status/held/events", "", tok(zeroToken)...)},
		},
		"get /semaphores": {
			{200, req(api, "GET", "/semaphores", "")},
			{400, req(framing, "GET", "/semaphores", "")},
			{401, req(guarded, "GET", "/semaphores", "")},
			{431, req(api, "GET", "/semaphores", "", bigHeader...)},
			{500, req(broken, "GET", "/semaphores", "")},
		},
		"post /semaphores/{name}": {
			{200, req(api, "POST", "/semaphores/status/free?permits=2", "")},
			{204, req(api, "POST", "/semaphores/status/reconnect?permits=2&hold=true", "", "Last-Event-ID", "3")},
			{400, req(api, "POST", "/semaphores/status/x", "")},
			{401, req(guarded, "POST", "/semaphores/status/x?permits=2", "")},
			{409, req(api, "POST", "/semaphores/status/held?permits=1", "")},
			{413, req(api, "POST", "/semaphores/status/x?permits=2", bigBody)},
			{422, req(api, "POST", "/semaphores/status/idem?permits=2&ttl=31s", "", idem...)},
			{429, req(limited, "POST", "/semaphores/limit/second?permits=2", "")},
			{431, req(api, "POST", "/semaphores/status/x?permits=2", "", bigHeader...)},
			{500, req(broken, "POST", "/semaphores/status/x?permits=2", "")},
			{503, req(down, "POST", "/semaphores/status/x?permits=2", "")},
		},
		"put /semaphores/{name}": {
			{200, req(api, "PUT", "/semaphores/status/held", "", tok(semHeld)...)},
			{400, req(api, "PUT", "/semaphores/status/held", "")},
			{401, req(guarded, "PUT", "/semaphores/status/held", "", tok(semHeld)...)},
			{410, req(api, "PUT", "/semaphores/status/held", "", tok(zeroToken)...)},
			{413, req(api, "PUT", "/semaphores/status/held", bigBody, tok(semHeld)...)},
			{431, req(api, "PUT", "/semaphores/status/held", "", append(tok(semHeld), bigHeader...)...)},
			{500, req(broken, "PUT", "/semaphores/status/held", "", tok(zeroToken)...)},
		},
		"delete /semaphores/{name}": {
			{204, func() int {
				return answer(t, api, "DELETE", "/semaphores/status/gone", "", tok(takeToken(t, api, "/semaphores/status/gone?permits=2"))...)
			}},
			{400, req(api, "DELETE", "/semaphores/status/held", "")},
			{401, req(guarded, "DELETE", "/semaphores/status/held", "", tok(semHeld)...)},
			{410, req(api, "DELETE", "/semaphores/status/held", "", tok(zeroToken)...)},
			{413, req(api, "DELETE", "/semaphores/status/held", bigBody, tok(zeroToken)...)},
			{431, req(api, "DELETE", "/semaphores/status/held", "", append(tok(zeroToken), bigHeader...)...)},
			{500, req(broken, "DELETE", "/semaphores/status/held", "", tok(zeroToken)...)},
		},
		"get /semaphores/{name}": {
			{200, req(api, "GET", "/semaphores/status/held?permits=1", "")},
			{400, req(api, "GET", "/semaphores/status/held", "")},
			{401, req(guarded, "GET", "/semaphores/status/held?permits=1", "")},
			{431, req(api, "GET", "/semaphores/status/held?permits=1", "", bigHeader...)},
			{500, req(broken, "GET", "/semaphores/status/held?permits=1", "")},
			{503, req(down, "GET", "/semaphores/status/held?permits=1", "")},
		},
		"get /semaphores/{name}/events": {
			{200, req(api, "GET", "/semaphores/status/held/events", "", tok(semHeld)...)},
			{204, req(api, "GET", "/semaphores/status/held/events", "", append(tok(zeroToken), "Last-Event-ID", "2")...)},
			{400, req(api, "GET", "/semaphores/status/held/events", "")},
			{401, req(guarded, "GET", "/semaphores/status/held/events", "", tok(semHeld)...)},
			{410, req(api, "GET", "/semaphores/status/held/events", "", tok(zeroToken)...)},
			{413, req(api, "GET", "/semaphores/status/held/events", bigBody, tok(zeroToken)...)},
			{431, req(api, "GET", "/semaphores/status/held/events", "", append(tok(semHeld), bigHeader...)...)},
			{500, req(broken, "GET", "/semaphores/status/held/events", "", tok(zeroToken)...)},
		},
		"get /rwlocks": {
			{200, req(api, "GET", "/rwlocks", "")},
			{400, req(framing, "GET", "/rwlocks", "")},
			{401, req(guarded, "GET", "/rwlocks", "")},
			{431, req(api, "GET", "/rwlocks", "", bigHeader...)},
			{500, req(broken, "GET", "/rwlocks", "")},
		},
		"post /rwlocks/{name}": {
			{200, req(api, "POST", "/rwlocks/status/free?mode=shared", "")},
			{204, req(api, "POST", "/rwlocks/status/reconnect?mode=shared&hold=true", "", "Last-Event-ID", "3")},
			{400, req(api, "POST", "/rwlocks/status/x?mode=both", "")},
			{401, req(guarded, "POST", "/rwlocks/status/x", "")},
			{409, req(api, "POST", "/rwlocks/status/held?mode=exclusive", "")},
			{413, req(api, "POST", "/rwlocks/status/x", bigBody)},
			{422, req(api, "POST", "/rwlocks/status/idem?mode=shared&ttl=31s", "", idem...)},
			{429, req(limited, "POST", "/rwlocks/limit/second?mode=shared", "")},
			{431, req(api, "POST", "/rwlocks/status/x", "", bigHeader...)},
			{500, req(broken, "POST", "/rwlocks/status/x", "")},
			{503, req(down, "POST", "/rwlocks/status/x", "")},
		},
		"put /rwlocks/{name}": {
			{200, req(api, "PUT", "/rwlocks/status/held", "", tok(rwHeld)...)},
			{400, req(api, "PUT", "/rwlocks/status/held", "")},
			{401, req(guarded, "PUT", "/rwlocks/status/held", "", tok(rwHeld)...)},
			{410, req(api, "PUT", "/rwlocks/status/held", "", tok(zeroToken)...)},
			{413, req(api, "PUT", "/rwlocks/status/held", bigBody, tok(rwHeld)...)},
			{431, req(api, "PUT", "/rwlocks/status/held", "", append(tok(rwHeld), bigHeader...)...)},
			{500, req(broken, "PUT", "/rwlocks/status/held", "", tok(zeroToken)...)},
		},
		"delete /rwlocks/{name}": {
			{204, func() int {
				return answer(t, api, "DELETE", "/rwlocks/status/gone", "", tok(takeToken(t, api, "/rwlocks/status/gone"))...)
			}},
			{400, req(api, "DELETE", "/rwlocks/status/held", "")},
			{401, req(guarded, "DELETE", "/rwlocks/status/held", "", tok(rwHeld)...)},
			{410, req(api, "DELETE", "/rwlocks/status/held", "", tok(zeroToken)...)},
			{413, req(api, "DELETE", "/rwlocks/status/held", bigBody, tok(zeroToken)...)},
			{431, req(api, "DELETE", "/rwlocks/status/held", "", append(tok(zeroToken), bigHeader...)...)},
			{500, req(broken, "DELETE", "/rwlocks/status/held", "", tok(zeroToken)...)},
		},
		"get /rwlocks/{name}": {
			{200, req(api, "GET", "/rwlocks/status/held", "")},
			{400, req(api, "GET", "/rwlocks/status/held?watch=true", "")},
			{401, req(guarded, "GET", "/rwlocks/status/held", "")},
			{431, req(api, "GET", "/rwlocks/status/held", "", bigHeader...)},
			{500, req(broken, "GET", "/rwlocks/status/held", "")},
			{503, req(down, "GET", "/rwlocks/status/held", "")},
		},
		"get /rwlocks/{name}/events": {
			{200, req(api, "GET", "/rwlocks/status/held/events", "", tok(rwHeld)...)},
			{204, req(api, "GET", "/rwlocks/status/held/events", "", append(tok(zeroToken), "Last-Event-ID", "2")...)},
			{400, req(api, "GET", "/rwlocks/status/held/events", "")},
			{401, req(guarded, "GET", "/rwlocks/status/held/events", "", tok(rwHeld)...)},
			{410, req(api, "GET", "/rwlocks/status/held/events", "", tok(zeroToken)...)},
			{413, req(api, "GET", "/rwlocks/status/held/events", bigBody, tok(zeroToken)...)},
			{431, req(api, "GET", "/rwlocks/status/held/events", "", append(tok(rwHeld), bigHeader...)...)},
			{500, req(broken, "GET", "/rwlocks/status/held/events", "", tok(zeroToken)...)},
		},
		"get /locksets": {
			{200, req(api, "GET", "/locksets", "")},
			{400, req(framing, "GET", "/locksets", "")},
			{401, req(guarded, "GET", "/locksets", "")},
			{431, req(api, "GET", "/locksets", "", bigHeader...)},
			{500, req(broken, "GET", "/locksets", "")},
		},
		"post /locksets/{names}": {
			{200, req(api, "POST", "/locksets/status/free/a,status/free/b", "")},
			{204, req(api, "POST", "/locksets/status/reconnect/a,status/reconnect/b?hold=true", "", "Last-Event-ID", "3")},
			{400, req(api, "POST", "/locksets/status/x,status/x", "")},
			{401, req(guarded, "POST", "/locksets/status/x,status/y", "")},
			{409, req(api, "POST", "/locksets/status/y,status/held", "")},
			{413, req(api, "POST", "/locksets/status/x,status/y", bigBody)},
			{422, req(api, "POST", "/locksets/status/idem/b,status/idem/a?ttl=31s", "", idem...)},
			{429, req(limited, "POST", "/locksets/limit/x,limit/y", "")},
			{431, req(api, "POST", "/locksets/status/x,status/y", "", bigHeader...)},
			{500, req(broken, "POST", "/locksets/status/x,status/y", "")},
			{503, req(down, "POST", "/locksets/status/x,status/y", "")},
		},
		"put /locksets/{names}": {
			{200, req(api, "PUT", "/locksets/status/set/b,status/set/a", "", tok(setHeld)...)},
			{400, req(api, "PUT", "/locksets/status/set/a,status/set/b", "")},
			{401, req(guarded, "PUT", "/locksets/status/set/a,status/set/b", "", tok(setHeld)...)},
			{410, req(api, "PUT", "/locksets/status/set/a,status/set/b", "", tok(zeroToken)...)},
			{413, req(api, "PUT", "/locksets/status/set/a,status/set/b", bigBody, tok(setHeld)...)},
			{431, req(api, "PUT", "/locksets/status/set/a,status/set/b", "", append(tok(setHeld), bigHeader...)...)},
			{500, req(broken, "PUT", "/locksets/status/set/a,status/set/b", "", tok(zeroToken)...)},
		},
		"delete /locksets/{names}": {
			{204, func() int {
				return answer(t, api, "DELETE", "/locksets/status/gone/b,status/gone/a", "", tok(takeToken(t, api, "/locksets/status/gone/a,status/gone/b"))...)
			}},
			{400, req(api, "DELETE", "/locksets/status/set/a,status/set/b", "")},
			{401, req(guarded, "DELETE", "/locksets/status/set/a,status/set/b", "", tok(setHeld)...)},
			{410, req(api, "DELETE", "/locksets/status/set/a,status/set/b", "", tok(zeroToken)...)},
			{413, req(api, "DELETE", "/locksets/status/set/a,status/set/b", bigBody, tok(zeroToken)...)},
			{431, req(api, "DELETE", "/locksets/status/set/a,status/set/b", "", append(tok(zeroToken), bigHeader...)...)},
			{500, req(broken, "DELETE", "/locksets/status/set/a,status/set/b", "", tok(zeroToken)...)},
		},
		"get /locksets/{names}": {
			{200, req(api, "GET", "/locksets/status/set/a,status/set/b", "")},
			{400, req(api, "GET", "/locksets/status/set/a,status/set/b?watch=true", "")},
			{401, req(guarded, "GET", "/locksets/status/set/a,status/set/b", "")},
			{431, req(api, "GET", "/locksets/status/set/a,status/set/b", "", bigHeader...)},
			{500, req(broken, "GET", "/locksets/status/set/a,status/set/b", "")},
			{503, req(down, "GET", "/locksets/status/set/a,status/set/b", "")},
		},
		"get /locksets/{names}/events": {
			{200, req(api, "GET", "/locksets/status/set/a,status/set/b/events", "", tok(setHeld)...)},
			{204, req(api, "GET", "/locksets/status/set/a,status/set/b/events", "", append(tok(zeroToken), "Last-Event-ID", "2")...)},
			{400, req(api, "GET", "/locksets/status/set/a,status/set/b/events", "")},
			{401, req(guarded, "GET", "/locksets/status/set/a,status/set/b/events", "", tok(setHeld)...)},
			{410, req(api, "GET", "/locksets/status/set/a,status/set/b/events", "", tok(zeroToken)...)},
			{413, req(api, "GET", "/locksets/status/set/a,status/set/b/events", bigBody, tok(zeroToken)...)},
			{431, req(api, "GET", "/locksets/status/set/a,status/set/b/events", "", append(tok(setHeld), bigHeader...)...)},
			{500, req(broken, "GET", "/locksets/status/set/a,status/set/b/events", "", tok(zeroToken)...)},
		},
		"get /healthz": {
			{200, req(admin, "GET", "/healthz", "")},
			{431, req(admin, "GET", "/healthz", "", bigHeader...)},
		},
		"get /readyz": {
			{200, req(admin, "GET", "/readyz", "")},
			{431, req(admin, "GET", "/readyz", "", bigHeader...)},
			{500, req(adminBroken, "GET", "/readyz", "")},
			{503, req(notReady, "GET", "/readyz", "")},
		},
		"get /metrics": {
			{200, req(admin, "GET", "/metrics", "")},
			{431, req(admin, "GET", "/metrics", "", bigHeader...)},
			{500, req(adminBroken, "GET", "/metrics", "")},
		},
	}
	documented := documentedStatuses(t)
	for _, op := range slices.Sorted(maps.Keys(ops)) {
		var provoked []int
		for _, p := range ops[op] {
			if got := p.do(); got != p.status {
				t.Errorf("%s: the provocation of %d answered %d", op, p.status, got)
			}
			provoked = append(provoked, p.status)
		}
		for status, why := range notProvokedHere[op] {
			t.Logf("%s %d: documented, not provoked here: %s", op, status, why)
			provoked = append(provoked, status)
		}
		slices.Sort(provoked)
		if !slices.Equal(provoked, documented[op]) {
			t.Errorf("%s: the spec lists %v, the handlers answer %v", op, documented[op], provoked)
		}
		delete(documented, op)
	}
	for op := range documented {
		t.Errorf("%s: in the spec, but nothing here provokes its statuses", op)
	}
}

// notProvokedHere lists, per operation, the documented statuses that no
// request can provoke through these servers, each with the reason. Keep
// it short: each entry is a promise of the spec nothing here checks.
var notProvokedHere = map[string]map[int]string{}

// watchCappedAtOne serves a sidecar of one watch stream, and fills it:
// the next watch is refused.
func watchCappedAtOne(t *testing.T, b *statusBench) *httptest.Server {
	t.Helper()
	srv := b.api(b.manager(lease.Config{}, 1))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/locks/status/watched?watch=true", nil)
	res, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); res.Body.Close() })
	if res.StatusCode != http.StatusOK {
		t.Fatalf("the first watch: %d", res.StatusCode)
	}
	return srv
}

// documentedStatuses is each operation's statuses in the spec, sorted.
func documentedStatuses(t *testing.T) map[string][]int {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string][]int{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" || method == "servers" {
				continue
			}
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatal(err)
			}
			key := method + " " + path
			for status := range op.Responses {
				n, err := strconv.Atoi(status)
				if err != nil {
					t.Fatalf("%s: response %q is not a status (no default or ranges: every status is listed)", key, status)
				}
				out[key] = append(out[key], n)
			}
			slices.Sort(out[key])
		}
	}
	return out
}

// With every master down, a heartbeat, a release and an events stream do
// not answer 503 (so the spec lists none for them): the heartbeat keeps
// the lease and answers the valid_until already promised, the release ends
// the lease (the keys lapse), the stream follows the lease. The same
// holds for a semaphore's permit, a read/write lock's reader and a lock
// set.
func TestHeartbeatReleaseAndEventsWithMastersDownAreNot503(t *testing.T) {
	b := newStatusBench(t)
	api := b.api(b.manager(lease.Config{}))
	token := acquireToken(t, api, "down/held")
	permit := takeToken(t, api, "/semaphores/down/held?permits=2")
	reader := takeToken(t, api, "/rwlocks/down/held?mode=shared")
	set := takeToken(t, api, "/locksets/down/set/a,down/set/b")
	for _, n := range b.nodes {
		n.SetDown(true)
	}
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"PUT", "/locks/down/held", token, 200},
		{"GET", "/locks/down/held/events", token, 200},
		{"DELETE", "/locks/down/held", token, 204},
		{"PUT", "/semaphores/down/held", permit, 200},
		{"GET", "/semaphores/down/held/events", permit, 200},
		{"DELETE", "/semaphores/down/held", permit, 204},
		{"PUT", "/rwlocks/down/held", reader, 200},
		{"GET", "/rwlocks/down/held/events", reader, 200},
		{"DELETE", "/rwlocks/down/held", reader, 204},
		{"PUT", "/locksets/down/set/b,down/set/a", set, 200},
		{"GET", "/locksets/down/set/a,down/set/b/events", set, 200},
		{"DELETE", "/locksets/down/set/a,down/set/b", set, 204},
	} {
		if got := answer(t, api, c.method, c.path, "", "Lock-Token", c.token); got != c.want {
			t.Errorf("%s %s with every master down: %d, want %d", c.method, c.path, got, c.want)
		}
	}
}
