package inspect

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/hex"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/pkcs11"
)

// KeyFacts is what is public about the key: its type and size and what
// its attributes allow.
type KeyFacts struct {
	Label   string `json:"label"`
	ID      string `json:"id"` // hex
	Type    string `json:"type"`
	Bits    int    `json:"bits"`
	Curve   string `json:"curve,omitempty"`
	Sign    bool   `json:"sign"`    // CKA_SIGN
	Decrypt bool   `json:"decrypt"` // CKA_DECRYPT
}

// Facts describes the key.
func Facts(k *pkcs11.Key) KeyFacts {
	f := KeyFacts{Label: k.Label(), ID: hex.EncodeToString(k.ID())}
	f.Sign, f.Decrypt = k.Usage()
	switch pub := k.Public().(type) {
	case *rsa.PublicKey:
		f.Type, f.Bits = "RSA", pub.N.BitLen()
	case *ecdsa.PublicKey:
		f.Type, f.Bits, f.Curve = "EC", pub.Curve.Params().BitSize, pub.Curve.Params().Name
	case *gost.PublicKey:
		f.Type, f.Bits, f.Curve = "GOST", pub.Curve.Bits, pub.Curve.Name
	}
	return f
}

// PINState is what the token says of its user PIN's tries (PKCS#11 gives
// flags, not a count; many modules set none of them).
type PINState struct {
	CountLow bool `json:"countLow"` // CKF_USER_PIN_COUNT_LOW: a wrong PIN was entered since the last success
	FinalTry bool `json:"finalTry"` // CKF_USER_PIN_FINAL_TRY: one more wrong PIN locks it
	Locked   bool `json:"locked"`   // CKF_USER_PIN_LOCKED
}

// ReadPINState reads the token's flags now (C_GetTokenInfo).
func ReadPINState(ctx context.Context, t *pkcs11.Token) (PINState, error) {
	var ti p11.TokenInfo
	err := t.Read(ctx, "read the token's flags", func(b pkcs11.Backend, slot uint) (err error) {
		ti, err = b.GetTokenInfo(slot)
		return err
	})
	if err != nil {
		return PINState{}, err
	}
	return PINState{CountLow: ti.Flags&p11.CKF_USER_PIN_COUNT_LOW != 0, FinalTry: ti.Flags&p11.CKF_USER_PIN_FINAL_TRY != 0,
		Locked: ti.Flags&p11.CKF_USER_PIN_LOCKED != 0}, nil
}
