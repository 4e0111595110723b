package framing

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

const smuggle = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"

// legit is a pipeline of well-framed requests whose bodies hold text that
// looks like the smuggling headers: only framing may tell head from body.
var legit = []string{
	"GET /locks HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n" + "\r\n\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n",
	"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"1f\r\n\r\nContent-Length: 5\r\n\r\nabcdefgh\r\n" + "3;ext=1\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n",
	"\r\nPUT /c HTTP/1.1\nHost: x\nContent-Length: 0\n\n",
	"DELETE /d HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}",
}

func feedAll(s *scanner, stream string, step int) bool {
	flagged := false
	for i := 0; i < len(stream); i += step {
		flagged = s.feed([]byte(stream[i:min(i+step, len(stream))])) || flagged
	}
	return flagged
}

// Well-framed requests are never flagged, however the bytes are split
// across reads; a request with both headers after them is.
func TestScannerFollowsFramingAndFlagsBothHeaders(t *testing.T) {
	stream := strings.Join(legit, "")
	for _, step := range []int{1, 2, 3, 7, 64, len(stream) + len(smuggle)} {
		var s scanner
		if feedAll(&s, stream, step) {
			t.Fatalf("step %d: well-framed requests flagged", step)
		}
		if s.state != inHead {
			t.Fatalf("step %d: lost track of framing (state %d)", step, s.state)
		}
		if !feedAll(&s, smuggle, step) {
			t.Fatalf("step %d: Content-Length with Transfer-Encoding not flagged", step)
		}
	}
	for _, head := range []string{
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
		"POST / HTTP/1.1\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\nCONTENT-LENGTH:3\nTRANSFER-ENCODING:chunked\n\n",
	} {
		var s scanner
		if !feedAll(&s, head, 5) {
			t.Errorf("not flagged: %q", head)
		}
	}
}

// Over a real net/http server: the flag is raised on the connection that
// sent the request, before its handler runs, and not on another.
func TestListenerFlagsTheConnectionBeforeItsHandlerRuns(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Watch(inner)
	seen := make(chan bool, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- ln.Ambiguous(r.RemoteAddr)
		_, _ = io.Copy(io.Discard, r.Body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	for _, tc := range []struct {
		request string
		want    bool
	}{{legit[1], false}, {smuggle, true}, {legit[2], false}} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(c, tc.request)
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		if got := <-seen; got != tc.want {
			t.Errorf("%q: Ambiguous = %v, want %v", tc.request[:20], got, tc.want)
		}
	}
}

// Arbitrary bytes never panic the scanner, and it keeps no more than its
// caps.
func FuzzScanner(f *testing.F) {
	f.Add([]byte(strings.Join(legit, "")+smuggle), uint8(3))
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n"), uint8(1))
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\nab"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		var s scanner
		feedAll(&s, string(data), int(step)+1)
		if len(s.line) > maxHeadBytes+len(data) {
			t.Fatalf("kept %d bytes", len(s.line))
		}
	})
}
