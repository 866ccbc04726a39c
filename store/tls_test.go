package store_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/internal/redistest"
	"github.com/signagent/signagent/store"
)

// writeCert writes a PEM certificate and key signed by parent (itself when
// nil) and returns them.
func writeCert(t *testing.T, dir, name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	c, _ := x509.ParseCertificate(der)
	return c, key
}

// TestRedisTLS: rediss:// reaches a redis-server that speaks TLS alone,
// trusting the CA of --store-ca-file; without it (the system's CAs) the
// server's certificate is refused, and the store is unavailable.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caKey := writeCert(t, dir, "ca", &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	writeCert(t, dir, "server", &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey)
	srv := redistest.StartTLS(t, filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	url := "rediss://" + srv.Addr
	r := openStore(t, url, store.Options{CAFile: filepath.Join(dir, "ca.crt"), Timeout: time.Second})
	if err := r.Ping(context.Background()); err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	untrusted := openStore(t, url, store.Options{Timeout: time.Second})
	if err := untrusted.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("without the CA: %v", err)
	}
	plain := openStore(t, "redis://"+srv.Addr, store.Options{Timeout: time.Second})
	if err := plain.Ping(context.Background()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("plain to a TLS port: %v", err)
	}
	if _, err := store.Open("redis://"+srv.Addr, store.Options{CAFile: filepath.Join(dir, "ca.crt"), Sealer: mustSealer(t)}); err == nil ||
		!strings.Contains(err.Error(), "for rediss://") {
		t.Fatalf("a CA file for plain redis://: %v", err)
	}
}

func mustSealer(t *testing.T) *store.Sealer {
	s, err := store.NewSealer(key(1))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
