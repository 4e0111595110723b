package injector_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sidelock/sidelock/internal/injector"
)

// Bounds of what one review may cost the injector (issue 14): its size,
// what a denial and a log line quote, however the pod is made.
func TestReviewBodyOverTheCapIsRefused(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	over := bytes.Repeat([]byte(" "), injector.MaxReviewBytes+1)
	for _, chunked := range []bool{false, true} {
		r := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(over))
		r.Header.Set("Content-Type", "application/json")
		if chunked {
			r.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		inj.ServeHTTP(rec, r)
		if rec.Code != http.StatusRequestEntityTooLarge || rec.Body.Len() > 256 {
			t.Errorf("chunked %v: HTTP %d, %d bytes, want a short 413", chunked, rec.Code, rec.Body.Len())
		}
	}
	// The largest review still is answered.
	doc := podJSON(optIn, map[string]string{"pad": ""}, "")
	body := reviewBody(t, request("u", "shop", "CREATE", doc))
	pad := injector.MaxReviewBytes - len(body)
	doc = podJSON(optIn, map[string]string{"pad": strings.Repeat("x", pad)}, "")
	body = reviewBody(t, request("u", "shop", "CREATE", doc))
	if len(body) != injector.MaxReviewBytes {
		t.Fatalf("body of %d bytes", len(body))
	}
	mutated(t, doc, post(t, inj, body))
}

// The observed amplification: 10,000 unknown sidelock.io/ annotations made
// a 3 MB denial and a 3 MB log line. Now one short denial and short lines.
func TestAnnotationFloodDeniedBriefly(t *testing.T) {
	var logs bytes.Buffer
	inj, err := injector.New(injector.Config{Spec: loadSpec(t), Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 100<<10)
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{"10,000 unknown", numbered(10000, "sidelock.io/x%d", "30s"), "10000 sidelock.io/ annotations, at most 32"},
		{"a few unknown", numbered(9, "sidelock.io/x%d", "30s"), "and 4 more"},
		{"a long unknown key", map[string]string{"sidelock.io/" + long: "1"}, "unknown annotation sidelock.io/nnn"},
		{"a long value", map[string]string{"sidelock.io/key-prefix": long}, "sidelock.io/key-prefix: a value of 102400 bytes, at most 256"},
		{"many problems", map[string]string{
			"sidelock.io/default-ttl": "x", "sidelock.io/max-ttl": "x", "sidelock.io/log-level": "x", "sidelock.io/listen-port": "x",
			"sidelock.io/admin-port": "x", "sidelock.io/cpu-limit": "x", "sidelock.io/memory-limit": "x",
		}, "and 2 more problems"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs.Reset()
			doc := podJSON(optIn, tc.annotations, "")
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(reviewBody(t, request("u", "shop", "CREATE", doc))))
			r.Header.Set("Content-Type", "application/json")
			inj.ServeHTTP(rec, r)
			resp := post(t, inj, reviewBody(t, request("u", "shop", "CREATE", doc)))
			if resp.Allowed || resp.Result == nil || resp.Result.Code != 422 || !strings.Contains(resp.Result.Message, tc.want) {
				t.Fatalf("want a denial saying %q, got %+v", tc.want, resp.Result)
			}
			if rec.Body.Len() > 4<<10 || strings.Contains(rec.Body.String(), long) {
				t.Errorf("answer of %d bytes: %.300s", rec.Body.Len(), rec.Body)
			}
			for line := range strings.Lines(logs.String()) {
				if len(line) > 4<<10 {
					t.Errorf("log line of %d bytes: %.300s", len(line), line)
				}
			}
		})
	}
}

func numbered(n int, format, value string) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf(format, i)] = value
	}
	return m
}

// Too many sidelock.io/ labels do not hide the opt-in label: the pod still
// gets its sidecar (the injector's own keys are always read).
func TestOptInLabelReadAmongManyLabels(t *testing.T) {
	labels := numbered(1000, "sidelock.io/a%03d", "x") // sorted before the opt-in label
	labels["sidelock.io/inject"] = "true"
	doc := podJSON(labels, nil, "")
	p := mutated(t, doc, post(t, newInjector(t, loadSpec(t)), reviewBody(t, request("u", "shop", "CREATE", doc))))
	if len(initContainers(p)) != 1 {
		t.Error("not injected")
	}
}

// What a malformed review quotes back is clipped; an oversized uid (echoed
// in every answer and log line) is refused.
func TestMalformedReviewQuotedBriefly(t *testing.T) {
	inj := newInjector(t, loadSpec(t))
	long := strings.Repeat("v", 1<<20)
	valid := string(reviewBody(t, request("u", "shop", "CREATE", podJSON(optIn, nil, ""))))
	for name, body := range map[string]string{
		"long apiVersion": strings.Replace(valid, "admission.k8s.io/v1", long, 1),
		"long uid":        strings.Replace(valid, `"uid":"u"`, `"uid":"`+long+`"`, 1),
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/mutate", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		inj.ServeHTTP(rec, r)
		if rec.Code != http.StatusBadRequest || rec.Body.Len() > 1<<10 {
			t.Errorf("%s: HTTP %d, %d bytes, want a short 400", name, rec.Code, rec.Body.Len())
		}
	}
}
