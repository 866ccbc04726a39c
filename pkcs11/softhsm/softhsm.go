// Package softhsm provisions SoftHSMv2 tokens, for the development token
// (package devtoken) and the test rigs (pkcs11/pkcs11test): a configuration
// file in a directory of the caller's, a token initialized through PKCS#11
// calls (so no PIN passes through a command line), and keys generated on the
// token with self-signed certificates, signed on the token by their own keys
// and stored next to them.
package softhsm

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	_ "embed"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
	"github.com/signagent/signagent/safefile"
)

//go:embed softhsm2.conf.tmpl
var confTemplate string

// ConfEnv is the variable SoftHSM reads its configuration path from. It is
// read when the module is initialized, so it must be set before.
const ConfEnv = "SOFTHSM2_CONF"

// WriteConfig writes softhsm2.conf into dir with its token store in
// dir/tokens, both private to the user, and returns the configuration path.
func WriteConfig(dir string) (string, error) {
	tokens := filepath.Join(dir, "tokens")
	if err := os.MkdirAll(tokens, 0o700); err != nil {
		return "", fmt.Errorf("could not create the token directory: %w", err)
	}
	conf := filepath.Join(dir, "softhsm2.conf")
	body := strings.ReplaceAll(confTemplate, "{{TOKENDIR}}", tokens)
	if err := safefile.Write(conf, []byte(body), 0o600); err != nil {
		return "", err
	}
	return conf, nil
}

// InitToken initializes a fresh token labelled label in the first free slot
// and sets its user PIN. It returns the token's serial number.
func InitToken(module, label, soPIN, userPIN string) (string, error) {
	ctx, release, err := pkcs11.ProvisioningContext(module)
	if err != nil {
		return "", err
	}
	defer release()
	slots, err := ctx.GetSlotList(true)
	if err != nil {
		return "", fmt.Errorf("could not list slots: %w", err)
	}
	free := -1
	for _, s := range slots {
		ti, err := ctx.GetTokenInfo(s)
		if err != nil {
			return "", fmt.Errorf("could not read slot %d: %w", s, err)
		}
		if strings.TrimRight(ti.Label, " ") == label && ti.Flags&p11.CKF_TOKEN_INITIALIZED != 0 {
			return "", fmt.Errorf("a token labelled %q already exists", label)
		}
		if ti.Flags&p11.CKF_TOKEN_INITIALIZED == 0 && free < 0 {
			free = int(s)
		}
	}
	if free < 0 {
		return "", errors.New("SoftHSM offers no free slot; check SOFTHSM2_CONF")
	}
	if err := ctx.InitToken(uint(free), soPIN, label); err != nil {
		return "", fmt.Errorf("could not initialize the token: %w", err)
	}
	// SoftHSM moves an initialized token to a new slot id: find it again.
	slots, err = ctx.GetSlotList(true)
	if err != nil {
		return "", fmt.Errorf("could not list slots: %w", err)
	}
	for _, s := range slots {
		ti, err := ctx.GetTokenInfo(s)
		if err != nil || strings.TrimRight(ti.Label, " ") != label {
			continue
		}
		sh, err := ctx.OpenSession(s, p11.CKF_SERIAL_SESSION|p11.CKF_RW_SESSION)
		if err != nil {
			return "", fmt.Errorf("could not open a session: %w", err)
		}
		defer ctx.CloseSession(sh)
		if err := ctx.Login(sh, p11.CKU_SO, soPIN); err != nil {
			return "", fmt.Errorf("could not log in as security officer: %w", err)
		}
		defer ctx.Logout(sh)
		if err := ctx.InitPIN(sh, userPIN); err != nil {
			return "", fmt.Errorf("could not set the user PIN: %w", err)
		}
		return strings.TrimRight(ti.SerialNumber, " "), nil
	}
	return "", fmt.Errorf("the token %q vanished after initialization", label)
}

// KeyType is the algorithm and size of a generated key.
type KeyType string

// The key types a token can be given.
const (
	RSA2048 KeyType = "rsa2048"
	P256    KeyType = "p256"
	P384    KeyType = "p384"
)

// KeySpec describes a key to generate on the token.
type KeySpec struct {
	Type  KeyType
	Label string
	ID    []byte
	// CommonName of the self-signed certificate stored with the key;
	// NoCert stores none.
	CommonName string
	NotBefore  time.Time
	NotAfter   time.Time
	NoCert     bool
	// NoDecrypt makes an RSA key that may sign but not decrypt.
	NoDecrypt bool
}

// GenerateKeys logs in to the token and generates each key on it, private,
// sensitive and not extractable, with a self-signed certificate under the
// same CKA_ID and label. RSA keys may sign and decrypt (certificate login
// decrypts a challenge on the token) unless NoDecrypt. It returns the
// certificates in the order of specs (nil for NoCert).
func GenerateKeys(module, tokenLabel, pin string, specs []KeySpec) ([]*x509.Certificate, error) {
	err := withSession(module, tokenLabel, pin, func(ctx *p11.Ctx, sh p11.SessionHandle) error {
		for _, s := range specs {
			if err := generate(ctx, sh, s); err != nil {
				return fmt.Errorf("could not generate key %q: %w", s.Label, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	certs := make([]*x509.Certificate, len(specs))
	for i, s := range specs {
		if s.NoCert {
			continue
		}
		key, err := pkcs11.Open(context.Background(), pkcs11.Selection{Module: module, Token: tokeninfo.TokenSelector{Label: tokenLabel},
			KeyLabel: s.Label, KeyID: s.ID, NoCertificate: true, PIN: pkcs11.PINSource{Value: pin}}, zerolog.Nop())
		if err != nil {
			return nil, fmt.Errorf("could not open the new key %q: %w", s.Label, err)
		}
		cert, err := SelfSigned(key, s.CommonName, s.NotBefore, s.NotAfter)
		key.Close()
		if err != nil {
			return nil, fmt.Errorf("could not make a certificate for key %q: %w", s.Label, err)
		}
		if err := ImportCertificate(module, tokenLabel, pin, s.ID, s.Label, cert); err != nil {
			return nil, err
		}
		certs[i] = cert
	}
	return certs, nil
}

func generate(ctx *p11.Ctx, sh p11.SessionHandle, s KeySpec) error {
	common := func(private bool) []*p11.Attribute {
		return []*p11.Attribute{
			p11.NewAttribute(p11.CKA_TOKEN, true),
			p11.NewAttribute(p11.CKA_PRIVATE, private),
			p11.NewAttribute(p11.CKA_ID, s.ID),
			p11.NewAttribute(p11.CKA_LABEL, s.Label),
		}
	}
	pub := append(common(false), p11.NewAttribute(p11.CKA_VERIFY, true))
	priv := append(common(true),
		p11.NewAttribute(p11.CKA_SIGN, true),
		p11.NewAttribute(p11.CKA_SENSITIVE, true),
		p11.NewAttribute(p11.CKA_EXTRACTABLE, false),
	)
	var mech uint
	switch s.Type {
	case RSA2048:
		mech = p11.CKM_RSA_PKCS_KEY_PAIR_GEN
		pub = append(pub,
			p11.NewAttribute(p11.CKA_KEY_TYPE, p11.CKK_RSA),
			p11.NewAttribute(p11.CKA_MODULUS_BITS, 2048),
			p11.NewAttribute(p11.CKA_PUBLIC_EXPONENT, []byte{1, 0, 1}),
			p11.NewAttribute(p11.CKA_ENCRYPT, !s.NoDecrypt))
		priv = append(priv, p11.NewAttribute(p11.CKA_KEY_TYPE, p11.CKK_RSA), p11.NewAttribute(p11.CKA_DECRYPT, !s.NoDecrypt))
	case P256, P384:
		mech = p11.CKM_EC_KEY_PAIR_GEN
		oid := asn1.ObjectIdentifier{1, 2, 840, 10045, 3, 1, 7}
		if s.Type == P384 {
			oid = asn1.ObjectIdentifier{1, 3, 132, 0, 34}
		}
		params, err := asn1.Marshal(oid)
		if err != nil {
			return err
		}
		pub = append(pub, p11.NewAttribute(p11.CKA_KEY_TYPE, p11.CKK_EC), p11.NewAttribute(p11.CKA_EC_PARAMS, params))
		priv = append(priv, p11.NewAttribute(p11.CKA_KEY_TYPE, p11.CKK_EC))
	default:
		return fmt.Errorf("unknown key type %q", s.Type)
	}
	_, _, err := ctx.GenerateKeyPair(sh, []*p11.Mechanism{p11.NewMechanism(mech, nil)}, pub, priv)
	return err
}

// withSession runs fn in a read-write session logged in to the token.
func withSession(module, tokenLabel, pin string, fn func(*p11.Ctx, p11.SessionHandle) error) error {
	ctx, release, err := pkcs11.ProvisioningContext(module)
	if err != nil {
		return err
	}
	defer release()
	slot, err := findSlot(ctx, tokenLabel)
	if err != nil {
		return err
	}
	sh, err := ctx.OpenSession(slot, p11.CKF_SERIAL_SESSION|p11.CKF_RW_SESSION)
	if err != nil {
		return fmt.Errorf("could not open a session: %w", err)
	}
	defer ctx.CloseSession(sh)
	if err := ctx.Login(sh, p11.CKU_USER, pin); err != nil && !errors.Is(err, p11.Error(p11.CKR_USER_ALREADY_LOGGED_IN)) {
		return fmt.Errorf("could not log in to token %q: %w", tokenLabel, err)
	}
	return fn(ctx, sh)
}

func findSlot(ctx *p11.Ctx, label string) (uint, error) {
	slots, err := ctx.GetSlotList(true)
	if err != nil {
		return 0, fmt.Errorf("could not list slots: %w", err)
	}
	for _, s := range slots {
		ti, err := ctx.GetTokenInfo(s)
		if err == nil && strings.TrimRight(ti.Label, " ") == label && ti.Flags&p11.CKF_TOKEN_INITIALIZED != 0 {
			return s, nil
		}
	}
	return 0, fmt.Errorf("no token labelled %q", label)
}

// ImportCertificate stores cert on the token under id and label.
func ImportCertificate(module, tokenLabel, pin string, id []byte, label string, cert *x509.Certificate) error {
	return withSession(module, tokenLabel, pin, func(ctx *p11.Ctx, sh p11.SessionHandle) error {
		_, err := ctx.CreateObject(sh, []*p11.Attribute{
			p11.NewAttribute(p11.CKA_CLASS, p11.CKO_CERTIFICATE),
			p11.NewAttribute(p11.CKA_CERTIFICATE_TYPE, p11.CKC_X_509),
			p11.NewAttribute(p11.CKA_TOKEN, true),
			p11.NewAttribute(p11.CKA_PRIVATE, false),
			p11.NewAttribute(p11.CKA_ID, id),
			p11.NewAttribute(p11.CKA_LABEL, label),
			p11.NewAttribute(p11.CKA_SUBJECT, cert.RawSubject),
			p11.NewAttribute(p11.CKA_ISSUER, cert.RawIssuer),
			p11.NewAttribute(p11.CKA_SERIAL_NUMBER, serialDER(cert)),
			p11.NewAttribute(p11.CKA_VALUE, cert.Raw),
		})
		if err != nil {
			return fmt.Errorf("could not store the certificate of key %q: %w", label, err)
		}
		return nil
	})
}

func serialDER(c *x509.Certificate) []byte {
	b, _ := asn1.Marshal(c.SerialNumber)
	return b
}

// SelfSigned makes a self-signed signing certificate for key, signed on the
// token by key itself.
func SelfSigned(key crypto.Signer, cn string, notBefore, notAfter time.Time) (*x509.Certificate, error) {
	if cn == "" {
		cn = "signagent development key"
	}
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Hour).UTC()
	}
	if notAfter.IsZero() {
		notAfter = notBefore.AddDate(2, 0, 0)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"signagent"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageContentCommitment | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}
