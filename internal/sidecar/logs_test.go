package sidecar

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/redistest"
)

// logBuffer is a log that the test reads while the sidecar writes it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines are the log's lines that hold every one of words.
func (l *logBuffer) lines(words ...string) []string {
	var out []string
	for line := range strings.SplitSeq(l.String(), "\n") {
		if containsAll(line, words) {
			out = append(out, line)
		}
	}
	return out
}

// waitFor waits until a line holds every one of words, and returns it.
func (l *logBuffer) waitFor(t *testing.T, within time.Duration, words ...string) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if found := l.lines(words...); len(found) > 0 {
			return found[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within %v:\n%s", words, within, l.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// realConfig is the shipped configuration over masters, loopback
// listeners on ports of their own, and a 1s key ttl (renewals every 333ms).
func realConfig(t *testing.T, masters []*redistest.Server) config.Config {
	t.Helper()
	cfg := testConfig(t)
	cfg.RedisAddrs, cfg.RedisGroups = nil, ""
	for _, m := range masters {
		cfg.RedisAddrs = append(cfg.RedisAddrs, m.Addr())
	}
	cfg.KeyTTL, cfg.HealthInterval = time.Second, 100*time.Millisecond
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runLogged builds and runs a sidecar logging at debug into the buffer
// it returns, until the test ends.
func runLogged(t *testing.T, cfg config.Config) (*Sidecar, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	s, err := New(t.Context(), cfg, WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context's end")
		}
		s.Close()
		if t.Failed() {
			t.Logf("sidecar log:\n%s", logs.String())
		}
	})
	return s, logs
}

// lockCall sends one lock API request and decodes its answer.
func lockCall(t *testing.T, s *Sidecar, method, name string, query url.Values, token string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.APIAddr()+"/locks/"+name+"?"+query.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Lock-Token", token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	return res.StatusCode, body
}

// acquireFor acquires name for owner with extra query parameters and
// returns the token.
func acquireFor(t *testing.T, s *Sidecar, name, owner string, extra ...string) string {
	t.Helper()
	q := url.Values{"owner": {owner}, "ttl": {"30s"}}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	code, body := lockCall(t, s, "POST", name, q, "")
	if code != 200 {
		t.Fatalf("acquire %s for %s: %d %v", name, owner, code, body)
	}
	return body["token"].(string)
}

// Started over masters that are all down, the sidecar says so at once:
// each master down, and that it is not ready. (The health rounds log only
// changes, and there is none to log.)
func TestLogsNotReadyAtStartWithEveryMasterDown(t *testing.T) {
	masters := redistest.StartN(t, 3)
	cfg := realConfig(t, masters)
	for _, m := range masters {
		m.Kill()
	}
	_, logs := runLogged(t, cfg)
	line := logs.waitFor(t, 5*time.Second, "level=WARN", "not ready at start-up", "up=0", "quorum=2")
	t.Log(line)
	for _, m := range masters {
		logs.waitFor(t, time.Second, "level=WARN", "master down", "master="+m.Addr())
	}
}

// At debug, an acquisition granted, one refused because another holds the
// lock (409) and a release each log a line with the name, the owner and
// the outcome; a lease ended by its max_hold is not logged as lost but as
// the cap it reached, at info when the caller asked for it and at warn
// when the sidecar's SIDELOCK_MAX_HOLD cut it. No line holds a token.
func TestLogsAcquireConflictReleaseAndMaxHoldWithoutTokens(t *testing.T) {
	cfg := realConfig(t, redistest.StartN(t, 3, redistest.WithAppendOnly()))
	cfg.MaxHold = 1500 * time.Millisecond
	s, logs := runLogged(t, cfg)
	tokens := []string{acquireFor(t, s, "orders/42", "alice")}
	if code, body := lockCall(t, s, "POST", "orders/42", url.Values{"owner": {"bob"}}, ""); code != 409 {
		t.Fatalf("second acquire: %d %v, want 409", code, body)
	}
	if code, body := lockCall(t, s, "DELETE", "orders/42", nil, tokens[0]); code != 204 {
		t.Fatalf("release: %d %v", code, body)
	}
	tokens = append(tokens,
		acquireFor(t, s, "capped/asked", "carol", "max_hold", "1s"),
		acquireFor(t, s, "capped/sidecar", "dave"))

	logs.waitFor(t, time.Second, "level=DEBUG", `msg="lock acquired"`, "name=orders/42", "owner=alice", "outcome=acquired")
	logs.waitFor(t, time.Second, "level=DEBUG", "held by another", "name=orders/42", "owner=bob", "outcome=held")
	logs.waitFor(t, time.Second, "level=DEBUG", `msg="lock released"`, "name=orders/42", "owner=alice", "reason=released")
	logs.waitFor(t, 10*time.Second, "level=INFO", "the max_hold its caller asked for", "name=capped/asked", "owner=carol", "max_hold=1s")
	logs.waitFor(t, 10*time.Second, "level=WARN", "SIDELOCK_MAX_HOLD", "name=capped/sidecar", "owner=dave", "max_hold=1.5s")
	if lost := logs.lines("lock lost"); len(lost) > 0 {
		t.Errorf("a lease ended by its cap was logged as lost: %q", lost)
	}
	for _, tok := range tokens {
		if strings.Contains(logs.String(), tok) {
			t.Fatalf("the log holds a lock token (%s)", tok)
		}
	}
}

// A lock lost is logged with its cause, whichever way it was lost: another
// value took the keys on every master (the next renewal finds them
// taken), or two of three masters went away and the validity ran out.
func TestLogsLockLostWithItsCause(t *testing.T) {
	t.Run("taken", func(t *testing.T) {
		masters := redistest.StartN(t, 3, redistest.WithAppendOnly())
		cfg := realConfig(t, masters)
		s, logs := runLogged(t, cfg)
		acquireFor(t, s, "taken", "erin")
		for _, m := range masters {
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			if err := c.Set(context.Background(), cfg.KeyPrefix+"taken", "someone-else:mallory", 30*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			_ = c.Close()
		}
		line := logs.waitFor(t, 10*time.Second, "level=WARN", `msg="lock lost"`, "name=taken", "owner=erin", "cause=")
		assertACause(t, line)
	})
	t.Run("validity ran out", func(t *testing.T) {
		masters := redistest.StartN(t, 3, redistest.WithAppendOnly())
		s, logs := runLogged(t, realConfig(t, masters))
		acquireFor(t, s, "stranded", "frank")
		masters[0].Kill()
		masters[1].Kill()
		line := logs.waitFor(t, 10*time.Second, "level=WARN", `msg="lock lost"`, "name=stranded", "owner=frank", "validity ran out")
		assertACause(t, line)
	})
}

func assertACause(t *testing.T, line string) {
	t.Helper()
	t.Log(line)
	for _, none := range []string{"cause=<nil>", `cause=""`, "no cause recorded"} {
		if strings.Contains(line, none) {
			t.Errorf("lock lost without a cause: %s", line)
		}
	}
}
