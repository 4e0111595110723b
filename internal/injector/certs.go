package injector

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// CertCheckInterval is how often the webhook's certificate files are
// checked for a new version (cert-manager renewals, a rotated Secret).
const CertCheckInterval = 10 * time.Second

// CertReloader serves the webhook's key pair in two files and picks up a new one
// when the files change, without a restart. A pair that fails to load
// (half-written) is logged and the previous one kept.
type CertReloader struct {
	certFile, keyFile string
	checkEvery        time.Duration
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string
	checked time.Time
}

// NewCertReloader loads the pair, checking the files again at most every
// checkEvery when a handshake asks for the certificate.
func NewCertReloader(certFile, keyFile string, checkEvery time.Duration, log *slog.Logger) (*CertReloader, error) {
	r := &CertReloader{certFile: certFile, keyFile: keyFile, checkEvery: checkEvery, log: log}
	stamp, err := r.fileStamp()
	if err == nil {
		err = r.load(stamp)
	}
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return r, nil
}

// fileStamp identifies the current version of both files. Secret volumes
// swap a symlink; Stat follows it.
func (r *CertReloader) fileStamp() (string, error) {
	var b strings.Builder
	for _, f := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%d/%d;", st.ModTime().UnixNano(), st.Size())
	}
	return b.String(), nil
}

func (r *CertReloader) load(stamp string) error {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.cert, r.stamp = &cert, stamp
	if cert.Leaf != nil {
		r.log.Info("serving certificate loaded", "subject", cert.Leaf.Subject.String(), "notAfter", cert.Leaf.NotAfter)
	}
	return nil
}

// GetCertificate is the tls.Config hook.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= r.checkEvery {
		r.checked = now
		stamp, err := r.fileStamp()
		if err == nil && stamp != r.stamp {
			err = r.load(stamp)
		}
		if err != nil {
			r.log.Warn("serving certificate not reloaded; keeping the previous one", "err", err)
		}
	}
	return r.cert, nil
}
