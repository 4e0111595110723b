package framing

import "testing"

// BenchmarkScannerRequest: what watching costs one request with a body.
func BenchmarkScannerRequest(b *testing.B) {
	req := []byte("PUT /locks/orders/42 HTTP/1.1\r\nHost: 127.0.0.1:7420\r\nUser-Agent: curl/8\r\nLock-Token: 0123456789abcdef0123456789abcdef\r\nContent-Length: 13\r\n\r\n{\"ttl\":\"30s\"}")
	var s scanner
	b.ReportAllocs()
	for b.Loop() {
		s.feed(req)
	}
}
