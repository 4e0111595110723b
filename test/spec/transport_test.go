package spec

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// validating is an http.RoundTripper that checks every answer it carries
// against the spec: the test's own requests and, behind a reverse proxy,
// those of the npm clients.
type validating struct {
	base     http.RoundTripper
	checker  *checker
	listener listener
}

// client is an HTTP client whose every answer from l is checked.
func (c *checker) client(l listener) *http.Client {
	return &http.Client{Transport: &validating{base: &http.Transport{}, checker: c, listener: l}, Timeout: 60 * time.Second}
}

func (v *validating) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := v.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if mediaType(res.Header) == sseMediaType {
		v.checker.check(v.listener, r, res.StatusCode, res.Header, nil)
		tmpl, _ := v.checker.route(v.listener, r)
		stream := answer{tmpl, r.Method, res.StatusCode}
		res.Body = newSSETap(res.Body, v.checker, r.Method+" "+r.URL.RequestURI(), stream)
		return res, nil
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	v.checker.check(v.listener, r, res.StatusCode, res.Header, body)
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

// proxy is a reverse proxy to the lock API at target whose answers are
// checked: the npm clients talk to it. Streams are flushed as they come.
func (c *checker) proxy(target string) http.Handler {
	u, _ := url.Parse(target)
	return &httputil.ReverseProxy{
		// SetURL keeps the escaped path, so orders%2F42 reaches the sidecar as sent.
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:     &validating{base: &http.Transport{}, checker: c, listener: lockAPI},
		FlushInterval: -1,
	}
}

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	id, name, data string
	hasID          bool
}

// sseReader reads a text/event-stream as the WHATWG EventSource algorithm
// does (lines, "field: value", an empty line dispatches), keeping the
// fields the spec documents.
type sseReader struct {
	br    *bufio.Reader
	retry string // the last retry: field seen
	// sawRetryFirst: a retry: field came before the first event, so a
	// client knows its reconnect delay before anything can go wrong.
	sawRetryFirst bool
	events        int
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{br: bufio.NewReader(r)} }

// next returns the next event, or the error that ended the stream (io.EOF
// when it ended cleanly).
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data []string
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line != "" {
				err = io.ErrUnexpectedEOF
			}
			return sseEvent{}, err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if ev.name == "" && data == nil && !ev.hasID {
				continue
			}
			ev.data = strings.Join(data, "\n")
			s.events++
			return ev, nil
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment (keep-alive)
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.id, ev.hasID = value, true
		case "event":
			ev.name = value
		case "data":
			data = append(data, value)
		case "retry":
			s.retry = value
			if s.events == 0 {
				s.sawRetryFirst = true
			}
		}
	}
}

// sseTap passes a stream through unchanged while a goroutine reads a copy
// and checks each event against the spec's event schemas.
type sseTap struct {
	io.ReadCloser
	copy *io.PipeWriter
	done chan struct{}
}

func newSSETap(body io.ReadCloser, c *checker, where string, stream answer) *sseTap {
	pr, pw := io.Pipe()
	tap := &sseTap{ReadCloser: body, copy: pw, done: make(chan struct{})}
	go func() {
		defer close(tap.done)
		defer pr.Close()
		c.checkStream(where, stream, newSSEReader(pr))
	}()
	return tap
}

func (s *sseTap) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if n > 0 {
		_, _ = s.copy.Write(p[:n])
	}
	if err != nil {
		s.copy.CloseWithError(err)
	}
	return n, err
}

// Close ends the stream and waits for its checks, so none outlives the test.
func (s *sseTap) Close() error {
	err := s.ReadCloser.Close()
	s.copy.CloseWithError(io.ErrClosedPipe)
	<-s.done
	return err
}

// checkStream checks every event of one stream: an id on each, a retry
// field before the first, a name the spec documents for this stream, data
// that matches its schema.
func (c *checker) checkStream(where string, stream answer, r *sseReader) {
	for {
		ev, err := r.next()
		if err != nil {
			return
		}
		at := fmt.Sprintf("%s: event %q (id %q)", where, ev.name, ev.id)
		if !ev.hasID || ev.id == "" {
			c.failf("%s: no id: field (standard SSE clients resume by it)", at)
		}
		if !r.sawRetryFirst {
			c.failf("%s: no retry: field before the first event", at)
		}
		seen := streamEvent{stream, ev.name}
		c.mu.Lock()
		c.events[seen]++
		c.mu.Unlock()
		schema, err := c.eventSchema(seen)
		if err != nil {
			c.mu.Lock()
			c.undocumentedEvents[seen] = err.Error()
			c.mu.Unlock()
			continue
		}
		if !json.Valid([]byte(ev.data)) {
			c.failf("%s: data is not JSON: %q", at, ev.data)
			continue
		}
		c.checkAgainst(at, schema, []byte(ev.data))
	}
}
