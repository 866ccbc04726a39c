package gosttoken

import (
	"bytes"
	"crypto/rand"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The tests drive the module through testdata/driver.c, compiled here with
// gcc (Go test files may not use cgo): it makes the PKCS#11 calls of
// gost-certlogin.md section 4 and prints each one's return value.

var (
	driverOnce sync.Once
	driverDir  string
	driverErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if driverDir != "" {
		os.RemoveAll(driverDir)
	}
	os.Exit(code)
}

func driver(t *testing.T) string {
	t.Helper()
	driverOnce.Do(func() {
		if driverDir, driverErr = os.MkdirTemp("", "gosttoken-driver-"); driverErr != nil {
			return
		}
		out, err := exec.Command("gcc", "-O1", "-I/usr/include/p11-kit-1", "-o", filepath.Join(driverDir, "driver"),
			"testdata/driver.c", "-ldl", "-lgcrypt", "-lhogweed", "-lnettle", "-lgmp").CombinedOutput()
		if err != nil {
			driverErr = errors.New("build the test driver (make deps installs libgcrypt20-dev, nettle-dev, libgmp-dev): " + string(out))
		}
	})
	if driverErr != nil {
		t.Fatal(driverErr)
	}
	return filepath.Join(driverDir, "driver")
}

// Return values the tests expect, from PKCS#11.
const (
	rvOK                     = "0x0"
	rvAttributeSensitive     = "0x11"
	rvAttributeValueInvalid  = "0x13"
	rvActionProhibited       = "0x1b"
	rvDeviceError            = "0x30"
	rvKeyFunctionNotAllowed  = "0x68"
	rvMechanismInvalid       = "0x70"
	rvMechanismParamInvalid  = "0x71"
	rvTemplateInconsistent   = "0xd1"
	rvWrappedKeyInvalid      = "0x110"
	mechDerive, mechKDF4357  = "0xd4321007", "0xd4321025"
	mechKeyWrap, mechDecrypt = "0x1224", "0x1222"
	mechOneStep              = "0x1203"
)

// run is what one driver run printed.
type run struct {
	out     string
	exit    int
	calls   [][2]string // name, rv, in order
	plain   []byte
	objects []int
	values  map[string]string // other lines: first word -> the rest
}

// rv is the return value of the last call of that name ("" when not made).
func (r run) rv(name string) string {
	for i := len(r.calls) - 1; i >= 0; i-- {
		if r.calls[i][0] == name {
			return r.calls[i][1]
		}
	}
	return ""
}

func drive(t *testing.T, tok Token, args ...string) run {
	t.Helper()
	var flags []string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		flags = append(flags, args[0])
		args = args[1:]
		if flags[len(flags)-1] == "-kdf" {
			flags = append(flags, args[0])
			args = args[1:]
		}
	}
	argv := append(append(flags, tok.Module(), tok.PINFile()), args...)
	cmd := exec.Command(driver(t), argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	r := run{out: string(out), values: map[string]string{}}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.exit = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if r.exit == 2 {
		t.Fatalf("driver %v: %s", args, stderr.String())
	}
	for _, l := range strings.Split(strings.TrimSpace(r.out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && strings.HasPrefix(f[0], "C_"):
			r.calls = append(r.calls, [2]string{f[0], f[1]})
		case len(f) == 2 && f[0] == "plain":
			r.plain, _ = hex.DecodeString(f[1])
		case len(f) == 2 && f[0] == "objects":
			n, _ := strconv.Atoi(f[1])
			r.objects = append(r.objects, n)
		case len(f) > 1:
			r.values[f[0]] = strings.Join(f[1:], " ")
		}
	}
	return r
}

// clean fails the test unless the module ended with no live session key.
func (r run) clean(t *testing.T) {
	t.Helper()
	if len(r.objects) == 0 || r.objects[len(r.objects)-1] != 0 {
		t.Errorf("session keys left alive: objects %v\n%s", r.objects, r.out)
	}
}

// envelope is what the driver needs of a GOST EnvelopedData.
type envelope struct {
	eph, ukm, enc, mac, wrapSet, iv, contentSet, ct, transport []byte
}

func (e envelope) pathA(mode string) []string {
	return []string{mode, hx(e.eph), hx(e.ukm), hx(e.enc), hx(e.mac), hx(e.wrapSet), hx(e.iv), hx(e.contentSet), hx(e.ct)}
}

func (e envelope) pathB(ukm string) []string {
	return []string{"b", hx(e.transport), ukm, hx(e.iv), hx(e.contentSet), hx(e.ct)}
}

func hx(b []byte) string { return hex.EncodeToString(b) }

// parseEnvelope reads an envelope with one GOST KeyTransRecipientInfo
// (a test's parser: signagent's own is in envelope/).
func parseEnvelope(t *testing.T, der []byte) envelope {
	t.Helper()
	var ci struct {
		Type    asn1.ObjectIdentifier
		Content asn1.RawValue `asn1:"explicit,tag:0"`
	}
	var ed struct {
		Version    int
		Recipients []struct {
			Version      int
			Rid, Alg     asn1.RawValue
			EncryptedKey []byte
		} `asn1:"set"`
		Content struct {
			Type asn1.ObjectIdentifier
			Alg  struct {
				OID    asn1.ObjectIdentifier
				Params struct {
					IV  []byte
					Set asn1.RawValue
				}
			}
			Data []byte `asn1:"tag:0"`
		}
	}
	var kt struct {
		Key struct{ Enc, Mac []byte }
		TP  struct {
			Set asn1.RawValue
			Eph struct {
				Alg asn1.RawValue
				Key asn1.BitString
			} `asn1:"tag:0"`
			UKM []byte
		} `asn1:"tag:0"`
	}
	var point []byte
	if _, err := asn1.Unmarshal(der, &ci); err != nil {
		t.Fatalf("envelope: %v", err)
	}
	if _, err := asn1.Unmarshal(ci.Content.Bytes, &ed); err != nil || len(ed.Recipients) != 1 {
		t.Fatalf("enveloped data: %v (%d recipients)", err, len(ed.Recipients))
	}
	tr := ed.Recipients[0].EncryptedKey
	if _, err := asn1.Unmarshal(tr, &kt); err != nil {
		t.Fatalf("key transport: %v", err)
	}
	if _, err := asn1.Unmarshal(kt.TP.Eph.Key.Bytes, &point); err != nil {
		t.Fatalf("ephemeral key: %v", err)
	}
	return envelope{eph: point, ukm: kt.TP.UKM, enc: kt.Key.Enc, mac: kt.Key.Mac, wrapSet: kt.TP.Set.FullBytes,
		iv: ed.Content.Alg.Params.IV, contentSet: ed.Content.Alg.Params.Set.FullBytes, ct: ed.Content.Data, transport: tr}
}

// fixtureToken provisions a token with the committed OpenSSL key of bits:
// for 256, the spec's known-answer key.
func fixtureToken(t *testing.T, bits int, o Options) Token {
	t.Helper()
	if _, err := exec.LookPath("certtool"); err != nil {
		t.Fatal("certtool not found: make deps installs gnutls-bin")
	}
	key, cert := "testdata/key512.pem", "testdata/cert512.pem"
	if bits == 256 {
		key, cert = "testdata/kat256-key.pem", "testdata/kat256-cert.pem"
	}
	tok := Token{Dir: t.TempDir(), Bits: bits, Label: "keyx" + strconv.Itoa(bits)}
	if _, err := tok.MakeWithKey("4321", key, cert, o); err != nil {
		t.Fatal(err)
	}
	return tok
}

// Content S-boxes as OpenSSL's gost engine names them in CRYPT_PARAMS.
const (
	contentTC26Z      = ""
	contentCryptoProA = "id-Gost28147-89-CryptoPro-A-ParamSet"
)

// opensslSeal encrypts content to cert with `openssl cms -encrypt -gost89`
// and the gost engine, the content S-box chosen by cryptParams.
func opensslSeal(t *testing.T, cert string, content []byte, cryptParams string) []byte {
	t.Helper()
	out, err := exec.Command("dpkg", "-L", "libengine-gost-openssl").Output()
	so := ""
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(l, "/engines-3/gost.so") {
			so = l
		}
	}
	if err != nil || so == "" {
		t.Fatal("the gost engine is not installed; make deps installs it (libengine-gost-openssl)")
	}
	dir := t.TempDir()
	conf := "openssl_conf = openssl_def\n[openssl_def]\nengines = engine_section\n[engine_section]\ngost = gost_section\n" +
		"[gost_section]\nengine_id = gost\ndynamic_path = " + so + "\ndefault_algorithms = ALL\n"
	if cryptParams != "" {
		conf += "CRYPT_PARAMS = " + cryptParams + "\n"
	}
	in, env, cnf := filepath.Join(dir, "in"), filepath.Join(dir, "env.der"), filepath.Join(dir, "gost.cnf")
	os.WriteFile(cnf, []byte(conf), 0o600)
	os.WriteFile(in, content, 0o600)
	cmd := exec.Command("openssl", "cms", "-encrypt", "-binary", "-in", in, "-outform", "DER", "-out", env, "-gost89", cert)
	cmd.Env = append(os.Environ(), "OPENSSL_CONF="+cnf)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("openssl cms -encrypt: %v: %s", err, b)
	}
	der, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func random(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// privateScalar is the private key's scalar, big-endian hex, as certtool
// --key-info shows it (for the nettle cross-check only).
func privateScalar(t *testing.T, keyFile string) string {
	t.Helper()
	out, err := exec.Command("certtool", "--key-info", "--infile", keyFile).Output()
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	i := strings.Index(s, "private key:")
	if i < 0 {
		t.Fatalf("certtool shows no private key:\n%s", s)
	}
	var d strings.Builder
	for _, l := range strings.Split(s[i+len("private key:"):], "\n")[1:] {
		l = strings.TrimSpace(l)
		if l == "" {
			break
		}
		d.WriteString(strings.ReplaceAll(l, ":", ""))
	}
	return d.String()
}
