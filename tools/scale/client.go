package scale

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Client is a minimal HTTP/1.1 client of the lock API: one keep-alive
// connection, one request at a time, a few fixed request shapes. It exists
// so that the process CPU a benchmark measures is the sidecar's, not the
// caller's: net/http's client costs about as much per request as the
// server, and would double the sidecar's apparent share.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	req  []byte // reused for every request
	body []byte // reused for every answer
}

// requestTimeout bounds one request, so a stuck sidecar fails a run
// instead of hanging it.
const requestTimeout = 10 * time.Second

// Dial connects to the lock API at addr ("127.0.0.1:port").
func Dial(addr string) (*Client, error) {
	conn, err := net.DialTimeout("tcp", addr, requestTimeout)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, r: bufio.NewReaderSize(conn, 4096)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Acquire POSTs /locks/name with query (e.g. "ttl=10s") and returns the
// token of a 200 answer, or the status of any other.
func (c *Client) Acquire(name, query string) (token string, status int, err error) {
	status, body, err := c.do("POST", "/locks/"+name+"?"+query, "")
	if err != nil || status != 200 {
		return "", status, err
	}
	// A byte scan keeps JSON decoding out of the caller's share.
	const key = `"token":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 || len(body) < i+len(key)+32 {
		return "", status, fmt.Errorf("no token in %q", body)
	}
	i += len(key)
	return string(body[i : i+32]), status, nil
}

// Release DELETEs /locks/name with the token and returns the status.
func (c *Client) Release(name, token string) (int, error) {
	status, _, err := c.do("DELETE", "/locks/"+name, token)
	return status, err
}

func (c *Client) do(method, target, token string) (int, []byte, error) {
	_ = c.conn.SetDeadline(time.Now().Add(requestTimeout))
	req := c.req[:0]
	req = append(req, method...)
	req = append(req, ' ')
	req = append(req, target...)
	req = append(req, " HTTP/1.1\r\nHost: sidelock\r\nContent-Length: 0\r\n"...)
	if token != "" {
		req = append(req, "Lock-Token: "...)
		req = append(req, token...)
		req = append(req, "\r\n"...)
	}
	req = append(req, "\r\n"...)
	c.req = req
	if _, err := c.conn.Write(req); err != nil {
		return 0, nil, err
	}
	return c.readResponse()
}

var errChunked = errors.New("chunked answers are not expected from the lock API")

// readResponse reads a status line, headers and a Content-Length body.
func (c *Client) readResponse() (int, []byte, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	length, err := c.readHeaders()
	if err != nil {
		return status, nil, err
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	c.body = c.body[:length]
	_, err = io.ReadFull(c.r, c.body)
	return status, c.body, err
}

// readHeaders skips the headers and returns the Content-Length (0 if none).
func (c *Client) readHeaders() (int, error) {
	length := 0
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return length, nil
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.Atoi(string(bytes.TrimSpace(value)))
			if err != nil {
				return 0, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, errChunked
		}
	}
}
