package injector

import (
	"bytes"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/testcert"
)

// A renewed certificate (cert-manager, a rotated Secret) is served without
// a restart; a broken pair is logged and the previous one kept; within the
// check interval the files are not read again.
func TestCertReloaderPicksUpRenewalsAndKeepsTheLastGoodPair(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	testcert.WriteSelfSigned(t, certFile, keyFile, 1)
	var log bytes.Buffer
	serial := func(r *CertReloader) int64 {
		t.Helper()
		c, err := r.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.Int64()
	}
	always, err := NewCertReloader(certFile, keyFile, 0, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	seldom, err := NewCertReloader(certFile, keyFile, time.Hour, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if s := serial(always); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	serial(seldom) // its first check: the files are unchanged

	time.Sleep(10 * time.Millisecond) // a distinct modification time
	testcert.WriteSelfSigned(t, certFile, keyFile, 2)
	if s := serial(always); s != 2 {
		t.Errorf("serial %d after renewal, want 2", s)
	}
	if s := serial(seldom); s != 1 {
		t.Errorf("serial %d within the check interval, want 1 (files read again too soon)", s)
	}

	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(certFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s := serial(always); s != 2 {
		t.Errorf("serial %d after a broken renewal, want 2 kept", s)
	}
	if !strings.Contains(log.String(), "serving certificate not reloaded") {
		t.Error("broken certificate not logged")
	}
	if _, err := NewCertReloader(certFile, keyFile, 0, slog.New(slog.NewTextHandler(&log, nil))); err == nil {
		t.Error("started with a broken pair")
	}
}
