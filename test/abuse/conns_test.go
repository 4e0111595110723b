//go:build linux

package abuse

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// Bounds of opening one flood connection: an answer that takes longer is
// as good as none to a caller, and a sidecar that stops accepting must
// not stall the harness.
const (
	dialTimeout   = 2 * time.Second
	answerTimeout = 2 * time.Second
	// openers is how many connections are being opened at once.
	openers = 256
)

// connFlood is the outcome of opening many idle keep-alive connections.
type connFlood struct {
	target   int
	conns    []net.Conn     // answered 200 and left open, idle
	refused  map[string]int // by how the sidecar (or the kernel) said no
	named    int            // refusals that were a named overload answer (a 429/503 problem with a code)
	skipped  int            // not tried: the time bound ran out first
	openTook time.Duration
}

func (f *connFlood) accepted() int { return len(f.conns) }

func (f *connFlood) refusedTotal() int {
	n := 0
	for _, c := range f.refused {
		n += c
	}
	return n
}

// openIdleConns opens n connections to addr (host:port), each sending one
// GET /locks (a request the sidecar answers without the masters) and then
// staying open and idle, as a keep-alive client between requests does.
// It gives up on starting new ones once within has passed.
func openIdleConns(addr string, n int, within time.Duration) *connFlood {
	f := &connFlood{target: n, refused: map[string]int{}}
	start := time.Now()
	deadline := start.Add(within)
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range min(openers, n) {
		wg.Go(func() {
			for range next {
				conn, refusal, named := openOne(addr)
				mu.Lock()
				if conn != nil {
					f.conns = append(f.conns, conn)
				} else {
					f.refused[refusal]++
					if named {
						f.named++
					}
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		if time.Now().After(deadline) {
			f.skipped = n - i
			break
		}
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	f.openTook = time.Since(start)
	return f
}

// openOne opens one connection and sends one request. It returns the open
// connection when the answer was 200, or how it was refused and whether
// the refusal was a named overload answer.
func openOne(addr string) (net.Conn, string, bool) {
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, "connect: " + errText(err), false
	}
	_ = conn.SetDeadline(time.Now().Add(answerTimeout))
	if _, err := io.WriteString(conn, "GET /locks HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		conn.Close()
		return nil, "write: " + errText(err), false
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		return nil, "no answer: " + errText(err), false
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if err == nil && res.StatusCode == http.StatusOK && !res.Close {
		_ = conn.SetDeadline(time.Time{})
		return conn, "", false
	}
	conn.Close()
	code := problemCode(body)
	named := code != "" && (res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusServiceUnavailable)
	return nil, fmt.Sprintf("%d %s", res.StatusCode, code), named
}

// problemCode is the "code" of a problem-details body, "" when none.
func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Code
}

// errText names a network error briefly, for the counts by cause.
func errText(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "out of file descriptors (client)"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "out of ports (client)"
	default:
		s := err.Error()
		if len(s) > 50 {
			s = s[len(s)-50:]
		}
		return s
	}
}

// stillOpen counts the connections the sidecar has not closed: a read
// that times out at once means the connection still stands idle.
func (f *connFlood) stillOpen() int {
	n := 0
	buf := make([]byte, 1)
	for _, c := range f.conns {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			n++
		}
	}
	return n
}

// closeAll closes every connection the flood left open (they stay
// counted as accepted).
func (f *connFlood) closeAll() {
	for _, c := range f.conns {
		c.Close()
	}
}
