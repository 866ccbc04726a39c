package tokencmd

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"

	"github.com/signagent/signagent/envelope"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/tokenerr"
)

// checkWay is one way a GOST token may open a certificate login's
// challenge, and what trying it showed: one run of `token check` on a
// real card says which way (and so which diversification) it takes.
type checkWay struct {
	Way   string `json:"way"`
	Uses  string `json:"uses"`
	Works bool   `json:"works"`
	Error string `json:"error,omitempty"`
}

// gostChallenge seals a random to cert as the service does (VKO GOST R
// 34.10-2012, the CryptoPro key wrap, GOST 28147-89 CFB: the emulator's
// sealer), so that the token is tried on what a login gets.
func gostChallenge(cert *x509.Certificate) ([]byte, []byte, error) {
	secret := make([]byte, envelope.ChallengeSize)
	if _, err := rand.Read(secret); err != nil {
		return nil, nil, err
	}
	der, err := envelope.Seal(secret, cert, false)
	if err != nil {
		return nil, nil, fmt.Errorf("could not seal a challenge to the certificate: %w", err)
	}
	return der, secret, nil
}

// tryGOSTWays opens one challenge each way, whether or not the module
// lists the mechanisms (a module may list less than it does).
func tryGOSTWays(ctx context.Context, key *pkcs11.Key, cert *x509.Certificate) ([]checkWay, error) {
	der, secret, err := gostChallenge(cert)
	if err != nil {
		return nil, err
	}
	var out []checkWay
	for _, w := range gostkeyx.Ways {
		t, err := envelope.GOSTTransport(der, cert)
		if err != nil {
			return nil, err
		}
		cw := checkWay{Way: w.Short(), Uses: w.String()}
		got, err := key.OpenGOSTWay(ctx, w, t)
		switch {
		case err != nil:
			cw.Error = err.Error()
		case !bytes.Equal(got, secret):
			cw.Error = "the token opened the challenge to other bytes"
		default:
			cw.Works = true
		}
		out = append(out, cw)
		if tokenerr.Recoverable(err) {
			break // the token is gone: the other ways cannot be tried
		}
	}
	return out, nil
}

// checkGOSTCertLogin opens a sealed challenge as a login does
// (envelope.Open, the way the key chose).
func checkGOSTCertLogin(ctx context.Context, key *pkcs11.Key, cert *x509.Certificate) error {
	if err := key.CanOpenGOSTContext(ctx); err != nil {
		return err
	}
	der, secret, err := gostChallenge(cert)
	if err != nil {
		return err
	}
	got, err := envelope.Open(der, cert, key)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, secret) {
		return errors.New("the token opened the challenge to other bytes")
	}
	return nil
}

// writeWays prints what each way did.
func writeWays(w io.Writer, ways []checkWay) {
	for _, cw := range ways {
		if cw.Works {
			fmt.Fprintf(w, "  tried %s: works\n", cw.Way)
		} else {
			fmt.Fprintf(w, "  tried %s: fails: %s\n", cw.Way, cw.Error)
		}
	}
}
