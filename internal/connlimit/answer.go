package connlimit

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// OverloadResponse is the whole HTTP/1.1 answer to a connection refused at
// the cap: 429 with the lock API's problem shape, code "overloaded", and
// Retry-After, then the connection closes. It is built once; a refusal
// costs the server no parsing and no goroutine of net/http.
func OverloadResponse(detail string, retryAfter time.Duration) []byte {
	secs := max(1, int(math.Ceil(retryAfter.Seconds())))
	body, _ := json.Marshal(struct {
		Code         string `json:"code"`
		Title        string `json:"title"`
		Status       int    `json:"status"`
		Detail       string `json:"detail"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}{"overloaded", "Too Many Requests", 429, detail, retryAfter.Milliseconds()})
	return fmt.Appendf(nil, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\n"+
		"Retry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", secs, len(body), body)
}
