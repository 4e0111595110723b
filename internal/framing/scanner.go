package framing

import (
	"bytes"
	"strconv"
	"strings"
)

// maxHeadBytes bounds the head the scanner keeps: beyond it the server
// answers 431 and closes, and the scanner stops (the lock API's heads are
// capped at 16 KiB).
const maxHeadBytes = 64 << 10

// maxLineBytes bounds a chunk-size or trailer line.
const maxLineBytes = 4 << 10

// maxChunkBytes is far above any body the lock API takes (64 KiB) and far
// below the int64 overflow of a chunk's size plus its CRLF.
const maxChunkBytes = 1 << 40

type state uint8

const (
	inHead      state = iota // reading a request head
	inBody                   // skipping a Content-Length body
	inChunkSize              // reading a chunk-size line
	inChunkData              // skipping chunk data and its CRLF
	inTrailer                // reading trailer lines until an empty one
	stopped                  // lost track or flagged: watch no more
)

// scanner follows the framing of the requests on one connection.
type scanner struct {
	state     state
	line      []byte // the head or line being read
	remaining int64  // bytes of body or chunk (with its CRLF) to skip
}

// feed consumes bytes read from the connection and reports whether a head
// carrying both Content-Length and Transfer-Encoding was completed.
func (s *scanner) feed(p []byte) bool {
	for len(p) > 0 && s.state != stopped {
		switch s.state {
		case inBody, inChunkData:
			p = s.skip(p)
		default:
			var flagged bool
			p, flagged = s.readLine(p)
			if flagged {
				s.stop()
				return true
			}
		}
	}
	return false
}

func (s *scanner) stop() { s.state, s.line = stopped, nil }

// skip drops body bytes.
func (s *scanner) skip(p []byte) []byte {
	n := min(int64(len(p)), s.remaining)
	s.remaining -= n
	if s.remaining == 0 {
		if s.state == inChunkData {
			s.state = inChunkSize
		} else {
			s.state = inHead
		}
	}
	return p[n:]
}

// readLine accumulates up to the next newline and acts on a complete line
// (or, in a head, on the empty line that ends it).
func (s *scanner) readLine(p []byte) ([]byte, bool) {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		s.line = append(s.line, p...)
		if len(s.line) > s.lineCap() {
			s.stop()
		}
		return nil, false
	}
	s.line = append(s.line, p[:i+1]...)
	rest := p[i+1:]
	if len(s.line) > s.lineCap() {
		s.stop()
		return rest, false
	}
	switch s.state {
	case inHead:
		return rest, s.headLine()
	case inChunkSize:
		s.chunkSizeLine()
	case inTrailer:
		s.trailerLine()
	}
	return rest, false
}

func (s *scanner) lineCap() int {
	if s.state == inHead {
		return maxHeadBytes
	}
	return maxLineBytes
}

// headLine runs once a line of the head ends; the head is complete at an
// empty line (blank lines before a request line are skipped, as net/http
// does).
func (s *scanner) headLine() bool {
	lastLine := s.line[bytes.LastIndexByte(s.line[:len(s.line)-1], '\n')+1:]
	if len(bytes.TrimRight(lastLine, "\r\n")) > 0 {
		return false // a line of the head; keep reading
	}
	if len(bytes.TrimSpace(s.line)) == 0 {
		s.line = s.line[:0] // leading blank lines
		return false
	}
	flagged := s.startBody(s.line)
	if s.state != stopped {
		s.line = s.line[:0] // reused for the next head: no allocation per request
	}
	return flagged
}

// startBody reads the framing headers of a complete head and reports
// whether it carries both.
func (s *scanner) startBody(head []byte) bool {
	var contentLength, transferEncoding []string
	_, rest, _ := bytes.Cut(head, []byte("\n")) // past the request line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		name, value, ok := bytes.Cut(bytes.TrimRight(line, "\r"), []byte(":"))
		switch {
		case !ok:
		case bytes.EqualFold(name, []byte("content-length")):
			contentLength = append(contentLength, string(bytes.TrimSpace(value)))
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			transferEncoding = append(transferEncoding, string(bytes.TrimSpace(value)))
		}
	}
	switch {
	case len(contentLength) > 0 && len(transferEncoding) > 0:
		return true
	case len(transferEncoding) > 0:
		s.state = inChunkSize
	case len(contentLength) == 1:
		n, err := strconv.ParseInt(contentLength[0], 10, 64)
		if err != nil || n < 0 {
			s.stop() // the server refuses it
			return false
		}
		s.state, s.remaining = inBody, n
		if n == 0 {
			s.state = inHead
		}
	case len(contentLength) > 1:
		s.stop() // the server refuses differing values; don't guess
	default:
		s.state = inHead // no body
	}
	return false
}

// chunkSizeLine reads "<hex size>[;extensions]".
func (s *scanner) chunkSizeLine() {
	field, _, _ := strings.Cut(strings.TrimRight(string(s.line), "\r\n"), ";")
	s.line = s.line[:0]
	size, err := strconv.ParseInt(strings.TrimSpace(field), 16, 64)
	switch {
	case err != nil || size < 0 || size > maxChunkBytes:
		s.stop() // the server refuses what it cannot buffer either
	case size == 0:
		s.state = inTrailer
	default:
		s.state, s.remaining = inChunkData, size+2 // the data and its CRLF
	}
}

// trailerLine ends the chunked body at an empty line.
func (s *scanner) trailerLine() {
	empty := len(bytes.TrimRight(s.line, "\r\n")) == 0
	s.line = s.line[:0]
	if empty {
		s.state = inHead
	}
}
