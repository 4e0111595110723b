package sidecar

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveLockAPIStub serves a trivial handler through the sidecar's own
// http.Server settings (NewHTTPServer), on loopback.
func serveLockAPIStub(t *testing.T) (addr string, srv *http.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv = NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}), slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), srv
}

// A slowloris client — one that trickles header lines and never finishes
// them — is cut off once the header read timeout runs out, however
// steadily it keeps sending.
func TestSlowHeadersAreCutOff(t *testing.T) {
	t.Parallel()
	addr, srv := serveLockAPIStub(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "POST /locks/slow HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan time.Duration, 1)
	go func() {
		_, _ = io.Copy(io.Discard, conn) // returns when the server closes
		closed <- time.Since(start)
	}()
	limit := srv.ReadHeaderTimeout + 2*time.Second
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case took := <-closed:
			t.Logf("trickling client cut off after %v (ReadHeaderTimeout %v, %d header lines sent)", took, srv.ReadHeaderTimeout, i)
			if took < srv.ReadHeaderTimeout-100*time.Millisecond {
				t.Fatalf("cut off after %v, before the %v header timeout", took, srv.ReadHeaderTimeout)
			}
			return
		case <-tick.C:
			if time.Since(start) > limit {
				t.Fatalf("a client trickling headers was still connected after %v", time.Since(start))
			}
			_, _ = io.WriteString(conn, "X-Trickle: 1\r\n") // fails once the server has closed
		}
	}
}

// Headers beyond MaxHeaderBytes are refused with 431 without reading on.
func TestOversizedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	addr, srv := serveLockAPIStub(t)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	big := strings.Repeat("a", 2*srv.MaxHeaderBytes)
	go func() {
		_, _ = io.WriteString(conn, "POST /locks/big HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "+big+"\r\n\r\n")
	}()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("%d-byte header: %d, want 431", len(big), res.StatusCode)
	}
}

// Many slow clients at once are all cut off: each one costs the sidecar a
// goroutine only until the header timeout.
func TestManySlowClientsAreAllCutOff(t *testing.T) {
	t.Parallel()
	addr, srv := serveLockAPIStub(t)
	const clients = 50
	closed := make(chan struct{}, clients)
	for range clients {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "GET /locks HTTP/1.1\r\n")
		go func() {
			_, _ = io.Copy(io.Discard, conn)
			closed <- struct{}{}
		}()
	}
	deadline := time.After(srv.ReadHeaderTimeout + 3*time.Second)
	for i := range clients {
		select {
		case <-closed:
		case <-deadline:
			t.Fatalf("%d of %d slow clients still connected after the header timeout", clients-i, clients)
		}
	}
	// The server still serves well-behaved clients.
	res, err := http.Get("http://" + addr + "/locks")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("after the slow clients: %d", res.StatusCode)
	}
}
