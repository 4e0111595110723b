package redisnode_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// TestTLS checks the TLS path, and that a master which accepts TCP but never
// completes the handshake (frozen) still costs a call only its budget, not
// DialTimeout.
func TestTLS(t *testing.T) {
	certFile, keyFile, roots := selfSignedCert(t)
	srv := redistest.Start(t, redistest.WithTLS(certFile, keyFile, certFile, false))
	opts := redisnode.Options{
		Addr: srv.TLSAddr(),
		TLS:  &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}

	n := newNode(t, opts)
	if ok, _, err := n.Acquire(t.Context(), "k", "A", time.Minute); err != nil || !ok {
		t.Fatalf("Acquire over TLS = %v, %v; want true, nil", ok, err)
	}

	srv.Stop()
	defer srv.Cont()
	fresh := newNode(t, opts) // must dial and handshake with a frozen master
	err := wantFailsWithinBudget(t, fresh)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want errors.Is(err, context.DeadlineExceeded)", err)
	}
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key to a temp
// dir and returns their paths and a pool trusting the certificate.
func selfSignedCert(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sidelock test"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

func writePEM(t *testing.T, path, blockType string, der []byte) {
	t.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
