package gost

import (
	"bytes"
	"errors"
	"testing"
)

// TestSignVerifies signs on every 256-bit parameter set and checks that
// Verify (tested against the standard's example) accepts the signature and
// refuses it over another hash or under another key.
func TestSignVerifies(t *testing.T) {
	for _, c := range []*Curve{cpA, cpB, cpC, curves[8]} {
		t.Run(c.Name, func(t *testing.T) {
			d, pub, err := GenerateEphemeral(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			digest := bytes.Repeat([]byte{0x5a}, c.Bits/8)
			sig, err := Sign(c, d, digest, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := Verify(pub, digest, sig); err != nil {
				t.Fatalf("a signature made by Sign: %v", err)
			}
			digest[0] ^= 1
			if err := Verify(pub, digest, sig); !errors.Is(err, ErrVerification) {
				t.Fatalf("a signature over another hash: %v", err)
			}
			digest[0] ^= 1
			_, other, _ := GenerateEphemeral(c, nil)
			if err := Verify(other, digest, sig); !errors.Is(err, ErrVerification) {
				t.Fatalf("a signature under another key: %v", err)
			}
			if _, err := Sign(c, d, digest[1:], nil); err == nil {
				t.Fatal("Sign took a hash of the wrong size")
			}
		})
	}
}
