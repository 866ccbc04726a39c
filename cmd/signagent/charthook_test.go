package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hookCommand is the command line of the chart's helm test pod
// (deploy/helm/signagent/templates/tests/ready.yaml), read from the
// template itself: its command: line with each {{ $NAME | quote }} given
// from vars (a name the test does not know fails it), without the binary.
func hookCommand(t *testing.T, vars map[string]string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "signagent", "templates", "tests", "ready.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "command: [") {
			if line != "" {
				t.Fatal("the helm test's template has more than one command: line")
			}
			line = strings.TrimPrefix(strings.TrimSpace(l), "command: ")
		}
	}
	if line == "" {
		t.Fatal("the helm test's template has no command: line")
	}
	var unknown []string
	line = regexp.MustCompile(`\{\{ \$(\w+) \| quote \}\}`).ReplaceAllStringFunc(line, func(m string) string {
		name := regexp.MustCompile(`\$(\w+)`).FindStringSubmatch(m)[1]
		v, ok := vars[name]
		if !ok {
			unknown = append(unknown, name)
		}
		return strconv.Quote(v)
	})
	if len(unknown) > 0 || strings.Contains(line, "{{") {
		t.Fatalf("the helm test's command: line has template values the test does not give (%v): %s", unknown, line)
	}
	var argv []string
	if err := json.Unmarshal([]byte(line), &argv); err != nil || len(argv) < 2 || argv[0] != "/usr/bin/signagent" {
		t.Fatalf("the helm test's command: line is not a list of strings starting with the binary: %s (%v)", line, err)
	}
	return argv[1:]
}

// TestChartTestHookCommand: the chart's helm test pod's command line (as
// its template writes it) asks a real agent over its metrics listener
// (TLS, no bearer token) whether it is ready: exit 0 and silent while it
// is, exit 1 with one line naming why while its token is out, 0 again
// when the token is back. No cluster here (no kind, no kubelet): the
// Service's name is loopback, the CA the agent's certificate; tools/helm
// checks the rendered pod mounts the CA where the command names it. The
// same flags reach the main listener with the bearer token from a file;
// a wrong CA, no token there, a token file open to others and a bad URL
// are each refused with one line.
func TestChartTestHookCommand(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := shortDir(t)
	cert, key, _ := selfSigned(t, dir)
	bearer := filepath.Join(dir, "bearer")
	if err := os.WriteFile(bearer, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	metrics, api := freeAddr(t, "127.0.0.1"), freeAddr(t, "127.0.0.1")
	sock := filepath.Join(dir, "a.sock")
	a := startServe(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--listen", "tcp:"+api, "--metrics-listen", metrics,
		"--tls-cert", cert, "--tls-key", key, "--bearer-token-file", bearer, "--audit-log", os.DevNull), sock)
	waitFor(t, 10*time.Second, "the agent ready", func() bool { code, _ := a.do("GET", "/readyz", ""); return code == 200 })

	url := "https://" + metrics
	hook := hookCommand(t, map[string]string{"bin": "/usr/bin/signagent", "url": url, "ca": cert})
	if code, stderr, _ := runBinary(t, signagent(t, nil, hook...)); code != 0 || stderr != "" {
		t.Fatalf("the helm test's command, the agent ready: exit %d: %s", code, stderr)
	}

	tk.Remove(t)
	waitFor(t, 5*time.Second, "/readyz to say not ready", func() bool { code, _ := a.do("GET", "/readyz", ""); return code == 503 })
	code, stderr, _ := runBinary(t, signagent(t, nil, hook...))
	if code != 1 {
		t.Fatalf("the helm test's command, the token out: exit %d, want 1: %s", code, stderr)
	}
	oneLine(t, stderr, "the agent at "+url+" is not ready: token: ")
	t.Logf("the token out: %s", strings.TrimSpace(stderr))
	tk.Insert(t)
	waitFor(t, 10*time.Second, "the helm test's command to pass with the token back", func() bool {
		code, _, _ := runBinary(t, signagent(t, nil, hook...))
		return code == 0
	})

	// --probe live asks /livez, which the metrics listener serves (it has
	// no /healthz), as the main listener does.
	for _, live := range [][]string{
		{"agent", "status", "--probe", "live", "--agent-url", url, "--agent-ca", cert},
		{"agent", "status", "--probe", "live", "--agent-url", "https://" + api, "--agent-ca", cert, "--bearer-token-file", bearer},
	} {
		if code, stderr, _ := runBinary(t, signagent(t, nil, live...)); code != 0 || stderr != "" {
			t.Errorf("%q: exit %d: %s", live, code, stderr)
		}
	}

	// The main listener: every route needs the bearer token.
	probe := []string{"agent", "status", "--probe", "ready", "--agent-url", "https://" + api, "--agent-ca", cert}
	if code, stderr, _ := runBinary(t, signagent(t, nil, append(probe, "--bearer-token-file", bearer)...)); code != 0 || stderr != "" {
		t.Fatalf("--probe ready on the main listener with the token: exit %d: %s", code, stderr)
	}
	if code, stderr, _ := runBinary(t, signagent(t, nil, probe...)); code == 0 || !strings.Contains(stderr, "401") {
		t.Errorf("--probe ready on the main listener without the token: exit %d: %s", code, stderr)
	} else {
		oneLine(t, stderr, "401")
	}
	if code, stderr, _ := runBinary(t, signagent(t, nil, "agent", "status", "--agent-url", "https://"+api, "--agent-ca", cert, "--bearer-token-file", bearer)); code != 0 || stderr != "" {
		t.Errorf("agent status on the main listener with the token: exit %d: %s", code, stderr)
	}

	other, _, _ := selfSigned(t, t.TempDir())
	open := filepath.Join(dir, "bearer-open")
	if err := os.WriteFile(open, []byte("0123456789abcdef0123456789abcdef\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args       []string
		code       int
		want       string
		notInError string
	}{
		{hookCommand(t, map[string]string{"bin": "/usr/bin/signagent", "url": url, "ca": other}), 4, "certificate", ""},
		{append(probe, "--bearer-token-file", open), 2, "--bearer-token-file", "0123456789abcdef"},
		{[]string{"agent", "status", "--probe", "ready", "--agent-url", "ftp://" + metrics}, 2, `--agent-url "ftp://` + metrics + `": want https://HOST:PORT`, ""},
		{[]string{"agent", "status", "--probe", "ready", "--agent-url", url + "/readyz"}, 2, "want https://HOST:PORT", ""},
		{[]string{"agent", "status", "--probe", "ready", "--agent-url", "http://192.0.2.1:9464"}, 2, "--agent-url http://192.0.2.1:9464: plain http beyond loopback", ""},
		{[]string{"agent", "status", "--probe", "ready", "--agent-ca", cert}, 2, "--agent-ca is for the agent over TCP: give --agent-url too", ""},
		{[]string{"agent", "status", "--probe", "ready", "--agent-url", url, "--agent-cert", cert}, 2, "--agent-cert and --agent-key go together", ""},
		{[]string{"agent", "status", "--probe", "ready", "--agent-url", url, "--agent-ca", bearer}, 2, "holds no PEM certificate", ""},
	} {
		code, stderr, _ := runBinary(t, signagent(t, nil, tc.args...))
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d: %s", tc.args, code, tc.code, stderr)
			continue
		}
		oneLine(t, stderr, tc.want)
		t.Logf("refused: %s", strings.TrimSpace(stderr))
		if tc.notInError != "" && strings.Contains(stderr, tc.notInError) {
			t.Errorf("%q: the error quotes the token: %s", tc.args, stderr)
		}
	}
}

// TestChartTestHookClientCertificate: with --tls-client-ca the agent asks
// every TCP caller for a client certificate, its metrics listener too; the
// helm test pod's command with --agent-cert/--agent-key (the args the
// chart adds then) is answered ready, without them refused in one line.
func TestChartTestHookClientCertificate(t *testing.T) {
	t.Parallel()
	tk := procToken(t)
	dir := shortDir(t)
	cert, key, _ := selfSigned(t, dir)
	ca, clientCert, clientKey := clientCertificate(t, dir)
	metrics := freeAddr(t, "127.0.0.1")
	sock := filepath.Join(dir, "a.sock")
	a := startServe(t, signagent(t, serveEnv(tk), "serve", "--listen", "unix:"+sock, "--metrics-listen", metrics,
		"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca, "--audit-log", os.DevNull), sock)
	waitFor(t, 10*time.Second, "the agent ready", func() bool { code, _ := a.do("GET", "/readyz", ""); return code == 200 })
	hook := hookCommand(t, map[string]string{"bin": "/usr/bin/signagent", "url": "https://" + metrics, "ca": cert})
	with := append(hook, "--agent-cert", clientCert, "--agent-key", clientKey)
	if code, stderr, _ := runBinary(t, signagent(t, nil, with...)); code != 0 || stderr != "" {
		t.Fatalf("with a client certificate: exit %d: %s", code, stderr)
	}
	code, stderr, _ := runBinary(t, signagent(t, nil, hook...))
	if code != 4 {
		t.Fatalf("without a client certificate: exit %d, want 4: %s", code, stderr)
	}
	oneLine(t, stderr, "the agent at https://"+metrics)
	if err := os.Chmod(clientKey, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stderr, _ = runBinary(t, signagent(t, nil, with...))
	if code != 2 {
		t.Fatalf("a client key open to others: exit %d, want 2: %s", code, stderr)
	}
	oneLine(t, stderr, "--agent-key: a secret file is open to others")
}

// clientCertificate writes a CA (ca.pem) and a client certificate it
// issued (client.pem, its key client.key, 0600).
func clientCertificate(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(10), Subject: pkix.Name{CommonName: "client CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(11), Subject: pkix.Name{CommonName: "helm test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	for f, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}
