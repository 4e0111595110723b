package main

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
)

// urlPassword needs percent-encoding in a URL (@ , ; / :), so the test
// also shows that SIDELOCK_REDIS_ADDRS's commas and a URL's own syntax do
// not cut such a password short.
const urlPassword = "url-S3cr3t-Hm4Tq@,;/:x"

// Masters that require a password, listed as redis://:password@host:port
// URLs: the sidecar authenticates with each URL's password and locks
// through them, names the masters by host:port, and the password (raw or
// percent-encoded) shows nowhere: not in its debug log, /readyz or /metrics.
// The same holds for the URLs in SIDELOCK_REDIS_GROUPS.
func TestE2ERedisURLCredentialsNeverShow(t *testing.T) {
	masters := redistest.StartN(t, 3, redistest.WithAppendOnly(), redistest.WithArgs("--requirepass", urlPassword))
	encoded := url.QueryEscape(urlPassword)
	urls := make([]string, len(masters))
	for i, m := range masters {
		urls[i] = "redis://:" + encoded + "@" + m.Addr()
	}
	flat := startSidecarAt(t, urls)
	grouped := startSidecarAt(t, nil, "SIDELOCK_REDIS_GROUPS=g="+strings.Join(urls, ","))
	for _, s := range []*sidecar{flat, grouped} {
		eventually(t, 3*time.Second, "ready", func() bool { return s.readyz(t) == 200 })
		tok := s.acquireSoon(t, "/locks/url")
		s.do(t, "DELETE", "/locks/url", tok)
		listed := s.readyzMasters(t)
		if len(listed) != len(masters) {
			t.Fatalf("/readyz lists %d masters, want %d", len(listed), len(masters))
		}
		for i, m := range listed {
			if m["addr"] != masters[i].Addr() {
				t.Errorf("/readyz names master %d %v, want its host:port %s", i, m["addr"], masters[i].Addr())
			}
		}
		assertNoSecrets(t, s, urlPassword, encoded, "S3cr3t-Hm4Tq")
	}
}

// A mistyped URL (here its scheme is missing, and net.SplitHostPort takes
// "password@host" for a host) stops the real sidecar at start-up, and
// what it prints does not hold the password.
func TestE2ERefusesAMistypedURLWithoutShowingThePassword(t *testing.T) {
	out := refusedStart(t, []string{"127.0.0.1:16380", "S3cr3t-Hm4Tq@127.0.0.1:16382", "127.0.0.1:16384"})
	if strings.Contains(out, "S3cr3t-Hm4Tq") {
		t.Fatalf("the refusal shows the password:\n%s", out)
	}
	if !strings.Contains(out, "entry 2 is not host:port or redis") {
		t.Fatalf("the refusal does not say which entry is wrong:\n%s", out)
	}
}
