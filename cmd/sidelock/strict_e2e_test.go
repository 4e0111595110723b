package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The built sidecar over real masters refuses a request that carries both
// Content-Length and Transfer-Encoding and closes its connection, so the
// request pipelined behind it is never served.
func TestE2EAmbiguousFramingIsRefusedAndTheConnectionClosed(t *testing.T) {
	s := startSidecar(t, durableMasters(t, 3))
	c, err := net.Dial("tcp", strings.TrimPrefix(s.api, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "POST /locks/smuggled HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
		"POST /locks/behind HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 400 || !strings.Contains(string(body), "ambiguous_framing") {
		t.Fatalf("both headers: %d %s", res.StatusCode, body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection not closed after the refusal: %v", err)
	}
	for _, name := range []string{"smuggled", "behind"} {
		if code, st := s.do(t, "GET", "/locks/"+name, ""); code != 200 || st["held"] != false {
			t.Fatalf("%s: %d %v, want free", name, code, st)
		}
	}
}

// Issue 14's borrowing attack against the built sidecar and real masters:
// B reuses A's Idempotency-Key with other parameters (422, no token) and
// with hold=true, closing the stream (400); A's heartbeat lease stays held
// and working, and C cannot take the lock.
func TestE2EIdempotencyKeyCannotBeBorrowed(t *testing.T) {
	s := startSidecar(t, durableMasters(t, 3))
	const key = "job-1-3f9a0c7e5d21b84f"
	post := func(query string) (int, map[string]any, string) {
		req, _ := http.NewRequest("POST", s.api+"/locks/idem1"+query, nil)
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		return res.StatusCode, body, string(raw)
	}
	code, a, _ := post("?ttl=60s")
	if code != 200 {
		t.Fatalf("A: %d %v", code, a)
	}
	token := a["token"].(string)
	if code, b, raw := post("?ttl=30s"); code != 422 || b["code"] != "idempotency_mismatch" || strings.Contains(raw, token) {
		t.Fatalf("B with other parameters: %d %s", code, raw)
	}
	if code, _, raw := post("?ttl=60s&hold=true"); code != 400 || strings.Contains(raw, token) {
		t.Fatalf("B with hold=true: %d %s", code, raw)
	}
	if code, body := s.do(t, "PUT", "/locks/idem1", token); code != 200 {
		t.Fatalf("A's heartbeat after B: %d %v", code, body)
	}
	if code, body := s.do(t, "POST", "/locks/idem1", ""); code != 409 {
		t.Fatalf("C: %d %v, want 409 (A still holds it)", code, body)
	}
}
