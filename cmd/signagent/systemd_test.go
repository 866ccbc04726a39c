package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/pkcs11/pkcs11test"
)

// socketActivated starts `systemd-socket-activate -l addr signagent serve
// args...` (Debian's systemd package): the real binary gets the listening
// socket the way systemd passes it. The child starts at the first
// connection, so callers should connect.
func socketActivated(t *testing.T, env []string, addr string, args ...string) (*exec.Cmd, *pkcs11test.LogBuffer, chan error) {
	t.Helper()
	if _, err := exec.LookPath("systemd-socket-activate"); err != nil {
		t.Fatal("systemd-socket-activate is missing (Debian package systemd; make test installs it)")
	}
	// systemd-socket-activate gives its child only the variables named
	// with -E (and PATH, to find the binary).
	argv := []string{"-l", addr, "-E", "PATH"}
	for _, kv := range env {
		argv = append(argv, "-E", kv)
	}
	cmd := exec.Command("systemd-socket-activate", append(append(argv, "signagent", "serve"), args...)...)
	stderr := &pkcs11test.LogBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
	return cmd, stderr, done
}

// freeAddr is a TCP address on host with a port nobody listens on now.
func freeAddr(t *testing.T, host string) string {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// selfSigned writes a certificate for 127.0.0.1 and its key (0600).
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "tls.pem"), filepath.Join(dir, "tls.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestSocketActivatedTCP: a TCP socket passed in by systemd gets the rules
// of --listen tcp:. With --tls-cert/--tls-key it is served over TLS (before
// the fix it was plain HTTP, the bearer token sent in clear, and https
// failed); beyond loopback without TLS the agent refuses to start (exit 2,
// one line); on loopback without TLS plain HTTP works as before.
func TestSocketActivatedTCP(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := t.TempDir()
	bearer := filepath.Join(dir, "bearer")
	os.WriteFile(bearer, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	env := append(serveEnv(tk), "SIGNAGENT_BEARER_TOKEN_FILE="+bearer, "SIGNAGENT_AUDIT_LOG="+os.DevNull)
	get := func(c *http.Client, url string) (int, error) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer 0123456789abcdef0123456789abcdef")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	plain := &http.Client{Timeout: 5 * time.Second}

	t.Run("loopback with TLS", func(t *testing.T) {
		certFile, keyFile, pool := selfSigned(t, dir)
		addr := freeAddr(t, "127.0.0.1")
		_, stderr, _ := socketActivated(t, env, addr, "--tls-cert", certFile, "--tls-key", keyFile)
		secure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		var code int
		var err error
		for i := 0; i < 100; i++ { // the first connection starts the agent
			if code, err = get(secure, "https://"+addr+"/readyz"); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil || code != http.StatusOK {
			t.Fatalf("https: %d %v\n%s", code, err, stderr.String())
		}
		if code, err := get(plain, "http://"+addr+"/readyz"); err == nil && code == http.StatusOK {
			t.Fatalf("plain http on a TLS socket answered 200")
		}
	})

	t.Run("beyond loopback without TLS", func(t *testing.T) {
		addr := freeAddr(t, "0.0.0.0")
		_, port, _ := net.SplitHostPort(addr)
		_, stderr, done := socketActivated(t, env, addr)
		var exit error
		deadline := time.After(20 * time.Second)
	wait:
		for {
			if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
				c.Close()
			}
			select {
			case exit = <-done:
				break wait
			case <-deadline:
				t.Fatalf("the agent did not refuse the socket: %s", stderr.String())
			case <-time.After(100 * time.Millisecond):
			}
		}
		ee, ok := exit.(*exec.ExitError)
		if !ok || ee.ExitCode() != cmdutil.ExitBadInput {
			t.Fatalf("exit %v, want %d\n%s", exit, cmdutil.ExitBadInput, stderr.String())
		}
		oneLine(t, stderr.String(), "beyond loopback without TLS")
		if !strings.Contains(stderr.String(), "systemd") {
			t.Fatalf("the error should say the socket came from systemd: %s", stderr.String())
		}
	})

	t.Run("loopback without TLS", func(t *testing.T) {
		addr := freeAddr(t, "127.0.0.1")
		_, stderr, _ := socketActivated(t, env, addr)
		var code int
		var err error
		for i := 0; i < 100; i++ {
			if code, err = get(plain, "http://"+addr+"/readyz"); err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil || code != http.StatusOK {
			t.Fatalf("http on loopback: %d %v\n%s", code, err, stderr.String())
		}
	})
}
