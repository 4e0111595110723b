package sidecar

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// unixConfig is devConfig with the lock API on a Unix socket in a
// directory of the test's own.
func unixConfig(t *testing.T) (cfg config.Config, path string) {
	t.Helper()
	cfg = devConfig(t)
	path = filepath.Join(t.TempDir(), "api.sock")
	cfg.ListenAddr = "unix://" + path
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

// unixClient is an HTTP client of the lock API on the socket at path; the
// URL's host is ignored.
func unixClient(path string) *http.Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial}}
}

// call sends one request to the lock API at http://sidelock and decodes
// its JSON answer, if any.
func call(t *testing.T, c *http.Client, method, path, token string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://sidelock"+path, nil)
	if token != "" {
		req.Header.Set("Lock-Token", token)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body
}

// runSidecar runs s until the test ends or stop is called, whichever is
// first; stop returns Run's error.
func runSidecar(t *testing.T, s *Sidecar) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
			s.Close()
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// On a Unix socket the sidecar serves the whole lock API, the socket has
// mode 0660 whatever the umask, and a clean shutdown removes it.
func TestSidecarServesOnAUnixSocket(t *testing.T) {
	cfg, path := unixConfig(t)
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Type() != fs.ModeSocket || info.Mode().Perm() != 0o660 {
		t.Fatalf("socket file: %v, %v; want a socket with mode 0660", info.Mode(), err)
	}
	if s.APIAddr() != path {
		t.Errorf("APIAddr() = %q, want the socket's path", s.APIAddr())
	}
	stop := runSidecar(t, s)
	c := unixClient(path)
	code, body := call(t, c, "POST", "/locks/demo?ttl=30s", "")
	if code != 200 {
		t.Fatalf("acquire: %d %v", code, body)
	}
	token, _ := body["token"].(string)
	if code, body := call(t, c, "PUT", "/locks/demo?ttl=45s", token); code != 200 {
		t.Fatalf("extend: %d %v", code, body)
	}
	if code, body := call(t, c, "DELETE", "/locks/demo", token); code != 204 {
		t.Fatalf("release: %d %v", code, body)
	}
	if code, body := call(t, c, "POST", "/locks/demo", ""); code != 200 {
		t.Fatalf("acquire after the release: %d %v", code, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file after a clean shutdown: %v, want it removed", err)
	}
}

// A socket left by a sidecar that died (nobody serves it) is replaced.
func TestStaleSocketIsReplaced(t *testing.T) {
	cfg, path := unixConfig(t)
	sidecartest.LeaveStaleSocket(t, path)
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	runSidecar(t, s)
	if code, body := call(t, unixClient(path), "POST", "/locks/after-crash", ""); code != 200 {
		t.Fatalf("acquire on the new socket: %d %v", code, body)
	}
}

// Whatever else is at the path is never deleted: a regular file, a
// directory, or a socket a live process serves.
func TestSocketPathInUseIsRefused(t *testing.T) {
	cfg, path := unixConfig(t)
	for _, c := range []struct {
		name, want string
		make       func() (check func())
	}{
		{"regular file", "is not a socket (a regular file); refusing to replace it", func() func() {
			if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
				t.Fatal(err)
			}
			return func() {
				if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
					t.Errorf("the regular file after the refusal: %q, %v", b, err)
				}
				os.Remove(path)
			}
		}},
		{"directory", "is not a socket (a directory)", func() func() {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
			return func() { os.Remove(path) }
		}},
		{"live socket", "another process serves the socket", func() func() {
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			return func() {
				if c, err := net.Dial("unix", path); err != nil {
					t.Errorf("the live socket after the refusal: %v", err)
				} else {
					c.Close()
				}
				ln.Close()
			}
		}},
	} {
		check := c.make()
		_, err := New(t.Context(), cfg)
		if err == nil || !strings.Contains(err.Error(), "SIDELOCK_LISTEN_ADDR") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s at the socket's path: %v; want a refusal saying %q", c.name, err, c.want)
		}
		check()
	}
}

// Unix socket clients are unnamed: each accepted connection gets an
// address of its own, so the framing watch, which tells connections apart
// by address, never mixes two of them up.
func TestUnixConnectionsHaveDistinctAddresses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "api.sock")
	ln, err := listenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := map[string]bool{}
	for range 3 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		a, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		addr := a.RemoteAddr().String()
		if addr == "" || seen[addr] {
			t.Fatalf("accepted connection's address %q is empty or repeated (%v)", addr, seen)
		}
		seen[addr] = true
	}
}

// SIDELOCK_MAX_CONNS caps the socket as it caps TCP: with every place
// busy in a request, a newcomer is answered 429 overloaded.
func TestConnectionCapHoldsOnTheSocket(t *testing.T) {
	cfg, path := unixConfig(t)
	cfg.MaxConns = 16 // the least allowed
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runSidecar(t, s)
	// Every place busy in a request: the holder's stream, then waiters
	// for the held lock, each on a connection of its own.
	holder := sendRequest(t, path, "POST /locks/capped?hold=true HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	if res := readResponse(t, holder); res.StatusCode != 200 {
		t.Fatalf("held lock's stream: %d", res.StatusCode)
	}
	waiters := cfg.MaxConns - 1
	for range waiters {
		sendRequest(t, path, "POST /locks/capped?wait=10s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	}
	deadline := time.Now().Add(3 * time.Second)
	for s.leases.Waiters() < waiters && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // polls the count: the sidecar queues the waiters on its own goroutines
	}
	if n := s.leases.Waiters(); n != waiters {
		t.Fatalf("%d waiters queued, want %d", n, waiters)
	}
	newcomer := sendRequest(t, path, "GET /locks/capped HTTP/1.1\r\nHost: x\r\n\r\n")
	res := readResponse(t, newcomer)
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "overloaded") {
		t.Fatalf("newcomer at the cap: %d %s; want 429 overloaded", res.StatusCode, body)
	}
	if st := s.lns.api.Stats(); st.Refused == 0 || st.Max != cfg.MaxConns {
		t.Fatalf("listener stats %+v: want the refusal counted under a cap of %d", st, cfg.MaxConns)
	}
}

// sendRequest writes a raw request on a new connection to the socket.
func sendRequest(t *testing.T, path, request string) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	return conn
}

func readResponse(t *testing.T, conn net.Conn) *http.Response {
	t.Helper()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return res // its body ends with the connection (sendRequest closes it)
}
