package bench

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/pkcs11"
)

// toolRows times `openssl cms -sign` through the PKCS#11 engine and
// `pkcs11-tool --sign`, one process per signature, one at a time and
// `workers` at a time. The PIN reaches them through a 0600 file and an
// environment variable, never their command lines.
func (o *Options) toolRows(ctx context.Context, cert *x509.Certificate, keyID []byte, raw1, rawN *Result) ([]*Result, error) {
	sel, d, workers := o.Token, o.Each, o.Workers
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		return nil, errors.New("openssl is not installed")
	}
	p11tool, err := exec.LookPath("pkcs11-tool")
	if err != nil {
		return nil, errors.New("pkcs11-tool is not installed (apt-get install opensc)")
	}
	engine, err := opensslEngine(openssl)
	if err != nil {
		return nil, err
	}
	mod, err := pkcs11.ResolveModule(sel.Module, "flag")
	if err != nil {
		return nil, err
	}
	pin, err := pkcs11.ReadPIN(sel.PIN)
	if err != nil {
		return nil, err
	}
	tokens, err := pkcs11.ListTokens(ctx, mod.Path)
	if err != nil {
		return nil, err
	}
	label := sel.Token.Label
	if label == "" && len(tokens) > 0 {
		for _, t := range tokens {
			if t.Initialized && (sel.Token.Serial == "" || t.Serial == sel.Token.Serial) {
				label = t.Label
				break
			}
		}
	}
	dir, err := os.MkdirTemp("", "signagent-bench-tools")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o600)
		return p
	}
	// libp11 reads pin-source files whole: no trailing newline.
	pinFile := write("pin", []byte(pin))
	conf := write("openssl.cnf", []byte(fmt.Sprintf(`openssl_conf = openssl_init
[openssl_init]
engines = engine_section
[engine_section]
pkcs11 = pkcs11_section
[pkcs11_section]
engine_id = pkcs11
dynamic_path = %s
MODULE_PATH = %s
init = 0
`, engine, mod.Path)))
	certFile := write("cert.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}))
	ts := canonical.Now()
	text := write("text", canonical.Text(o.APIKey, benchCredential, ts))
	uri := "pkcs11:token=" + url.PathEscape(label) + ";id=" + pctEncode(keyID) + ";type=private?pin-source=file:" + pinFile
	env := append(secret.ChildEnv(os.Environ()), "OPENSSL_CONF="+conf, "SIGNAGENT_BENCH_PIN="+pin)
	// SoftHSM (like many tokens) has no hashing ECDSA mechanism: for an EC
	// key pkcs11-tool signs a SHA-256 digest made beforehand with raw ECDSA.
	mech, toolInput := "SHA256-RSA-PKCS", text
	if cert.PublicKeyAlgorithm == x509.ECDSA {
		b, _ := os.ReadFile(text)
		sum := sha256.Sum256(b)
		mech, toolInput = "ECDSA", write("digest", sum[:])
	}
	run := func(args ...string) func(context.Context) string {
		return func(ctx context.Context) string {
			out := filepath.Join(dir, fmt.Sprintf("sig-%d", time.Now().UnixNano()))
			cmd := exec.CommandContext(ctx, args[0], append(args[1:], out)...)
			cmd.Env = env
			err := cmd.Run()
			os.Remove(out)
			if err != nil {
				return "exit"
			}
			return ""
		}
	}
	osslSign := run(openssl, "cms", "-sign", "-binary", "-in", text, "-signer", certFile, "-engine", "pkcs11", "-keyform", "engine",
		"-inkey", uri, "-outform", "DER", "-out")
	toolSign := run(p11tool, "--module", mod.Path, "--token-label", label, "--login", "--pin", "env:SIGNAGENT_BENCH_PIN",
		"--sign", "-m", mech, "--id", hex.EncodeToString(keyID), "-i", toolInput, "-o")
	if osslSign(ctx) != "" {
		return nil, errors.New("openssl cms -sign through the PKCS#11 engine failed; is libengine-pkcs11-openssl installed?")
	}
	if toolSign(ctx) != "" {
		return nil, errors.New("pkcs11-tool --sign failed")
	}
	o.say("openssl cms -sign and pkcs11-tool --sign, a process per signature...")
	var rows []*Result
	for _, t := range []struct {
		name string
		op   func(context.Context) string
		note string
	}{
		{"openssl cms -sign (process)", osslSign, "engine_pkcs11, CMS"},
		{"pkcs11-tool --sign (process)", toolSign, "bare signature, no CMS"},
	} {
		r1 := RunContext(ctx, t.name, 1, d, t.op)
		r1.Base, r1.Note = raw1, t.note
		rN := RunContext(ctx, t.name, workers, d, t.op)
		rN.Base, rN.Note = rawN, t.note
		rows = append(rows, r1, rN)
	}
	return rows, nil
}

// opensslEngine finds engine_pkcs11 in OpenSSL's engines directory.
func opensslEngine(openssl string) (string, error) {
	out, err := exec.Command(openssl, "version", "-e").Output()
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`ENGINESDIR: "([^"]+)"`).FindSubmatch(out)
	if m == nil {
		return "", errors.New("openssl does not say where its engines are")
	}
	p := filepath.Join(string(m[1]), "pkcs11.so")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("the OpenSSL PKCS#11 engine is not installed (apt-get install libengine-pkcs11-openssl)")
	}
	return p, nil
}

func pctEncode(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		fmt.Fprintf(&sb, "%%%02x", c)
	}
	return sb.String()
}
