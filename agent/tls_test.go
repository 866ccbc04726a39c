package agent_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/signagent/signagent/agent"
	"github.com/signagent/signagent/agent/listen"
	"github.com/signagent/signagent/agentclient"
)

type pki struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	dir    string
}

func issue(t *testing.T, p *pki, cn string, server bool) (tls.Certificate, string, string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	cf, kf := filepath.Join(p.dir, cn+".pem"), filepath.Join(p.dir, cn+".key")
	os.WriteFile(cf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	c, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	return c, cf, kf
}

// TestTLSListener serves the agent over TLS with client certificates: a
// caller with a certificate from the CA and the bearer token gets in; one
// without a certificate does not complete the handshake.
func TestTLSListener(t *testing.T) {
	p := &pki{dir: t.TempDir()}
	p.caKey, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, p.caKey.Public(), p.caKey)
	p.caCert, _ = x509.ParseCertificate(der)
	caFile := filepath.Join(p.dir, "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_, scf, skf := issue(t, p, "server", true)
	client, _, _ := issue(t, p, "partner-crm", false)

	if _, err := (agent.TLSFiles{ClientCA: caFile}).Config(); err == nil {
		t.Fatal("a client CA without a server certificate was accepted")
	}
	cfg, err := agent.TLSFiles{Cert: scf, Key: skf, ClientCA: caFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	h := start(t, options{bearer: token, tls: agent.TLSFiles{Cert: scf, Key: skf, ClientCA: caFile}})

	roots := x509.NewCertPool()
	roots.AddCert(p.caCert)
	url := "https://" + strings.TrimPrefix(h.tcp, "tcp:")
	ok := agentclient.NewTCP(url, token, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{client}})
	r, err := ok.Ready(context.Background())
	if err != nil || r.Status != "ready" {
		t.Fatalf("with a client certificate: %+v %v", r, err)
	}
	if _, err := ok.Sign(context.Background(), signReq()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.audit.String(), "cn=partner-crm") {
		t.Fatalf("the client certificate's name is not in the audit log: %s", h.audit.String())
	}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	if resp, err := noCert.Get(url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("a caller without a client certificate got HTTP %d", resp.StatusCode)
	}
	eventually(t, 2*time.Second, "the refused handshake to reach the diagnostic log", func() bool {
		return strings.Contains(h.logs.String(), `"component":"http"`) && strings.Contains(h.logs.String(), "TLS handshake error")
	})
	noToken := agentclient.NewTCP(url, "", &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{client}})
	if _, err := noToken.Ready(context.Background()); apiErr(t, err).Status != 401 {
		t.Fatalf("without the bearer token: %v", err)
	}
	// With TLS, an address beyond loopback is allowed (only bound and closed:
	// no traffic goes to it).
	if l2, err := listen.ListenTCP("0.0.0.0:0", cfg); err != nil {
		t.Fatal(err)
	} else {
		l2.Close()
	}
}

// TestSocketGroup: with a group the socket is 0660 and owned by it.
func TestSocketGroup(t *testing.T) {
	dir, err := os.MkdirTemp("", "sa")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "g.sock")
	l, err := listen.ListenUnix(listen.UnixSocket{Path: p, Group: os.Getgid(), HasGroup: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o660 {
		t.Fatalf("mode %v, want 0660", st.Mode().Perm())
	}
	if gid := st.Sys().(*syscall.Stat_t).Gid; int(gid) != os.Getgid() {
		t.Fatalf("group %d, want %d", gid, os.Getgid())
	}
}

// TestSocketAppearsListening: the socket's path appears only once it
// listens with its final mode (it is made under a temporary name and
// linked there): a caller polling for the path and connecting at once is
// never refused, and no temporary name is left behind. A prober connects
// in a tight loop while the listener is made, many times over.
func TestSocketAppearsListening(t *testing.T) {
	dir, err := os.MkdirTemp("", "sa")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "a.sock")
	for i := range 200 {
		stop := make(chan struct{})
		refused := make(chan error, 1)
		go func() {
			defer close(refused)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := os.Lstat(p); err != nil {
					continue
				}
				c, err := net.Dial("unix", p)
				if err != nil {
					refused <- err
					return
				}
				c.Close()
				return
			}
		}()
		l, err := listen.ListenUnix(listen.UnixSocket{Path: p})
		if err != nil {
			t.Fatal(err)
		}
		if err := <-refused; err != nil {
			t.Fatalf("round %d: the path was there before the socket listened: %v", i, err)
		}
		close(stop)
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("round %d: %v %v", i, st, err)
		}
		l.Close()
		os.Remove(p)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left in the directory: %v", left)
	}
}
