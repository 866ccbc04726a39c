package storetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLS is a test CA and a certificate it issued for 127.0.0.1 (server and
// client use: a cluster's nodes present it to each other), in PEM files.
type TLS struct {
	CA, Cert, Key string
	pool          *x509.CertPool
}

// NewTLS makes the CA and the certificate in a temporary directory.
func NewTLS(t testing.TB) *TLS {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, caKey := writeCert(t, dir, "ca", &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	writeCert(t, dir, "server", &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}, ca, caKey)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &TLS{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key"), pool: pool}
}

// config is redis-server's configuration for TLS alone: its certificate,
// the CA it checks its peers by (a master, a replica, a cluster node: all
// of them over TLS), and clients not asked for certificates.
func (x *TLS) config() []string {
	return []string{"tls-cert-file " + x.Cert, "tls-key-file " + x.Key, "tls-ca-cert-file " + x.CA, "tls-auth-clients no",
		"tls-replication yes"}
}

// client is the rig's own TLS client configuration (waitFor, Command).
func (x *TLS) client() *tls.Config {
	if x == nil {
		return nil
	}
	return &tls.Config{RootCAs: x.pool, MinVersion: tls.VersionTLS12}
}

// writeCert writes a PEM certificate and key signed by parent (itself when
// nil) as dir/name.crt and dir/name.key.
func writeCert(t testing.TB, dir, name string, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}
