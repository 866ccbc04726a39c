package gost

import (
	"encoding/binary"
	"fmt"
)

// UKMSize is the length of the key transport's user keying material.
const UKMSize = 8

// Diversify is CryptoPro KEK diversification (RFC 4357 section 6.5): eight
// rounds, each encrypting the key with itself in CFB mode under an IV made
// of two sums of the key's words, chosen by the bits of one UKM byte.
func Diversify(kek, ukm []byte, s *SBox) ([]byte, error) {
	if len(kek) != KeySize {
		return nil, fmt.Errorf("a GOST 28147-89 key is %d bytes, not %d", KeySize, len(kek))
	}
	if len(ukm) != UKMSize {
		return nil, fmt.Errorf("the UKM is %d bytes, not %d", UKMSize, len(ukm))
	}
	k := append([]byte(nil), kek...)
	for i := range UKMSize {
		var s1, s2 uint32
		for j := range 8 {
			w := binary.LittleEndian.Uint32(k[4*j:])
			if ukm[i]>>j&1 == 1 {
				s1 += w
			} else {
				s2 += w
			}
		}
		var iv [BlockSize]byte
		binary.LittleEndian.PutUint32(iv[:], s1)
		binary.LittleEndian.PutUint32(iv[4:], s2)
		e, err := NewCFBEncrypter(k, iv[:], s, false)
		if err != nil {
			return nil, err
		}
		e.XORKeyStream(k, k)
	}
	return k, nil
}

// WrapCryptoPro is the CryptoPro key wrap (RFC 4357 section 6.3): the KEK
// diversified with the UKM (section 6.5), the content key encrypted under
// it in ECB mode, and the content key's IMIT under it with the UKM as IV.
// It returns the 32-byte encrypted key and the 4-byte MAC.
func WrapCryptoPro(kek, ukm, cek []byte, s *SBox) (enc, mac []byte, err error) {
	if len(cek) != KeySize {
		return nil, nil, fmt.Errorf("a GOST 28147-89 content key is %d bytes, not %d", KeySize, len(cek))
	}
	k, err := Diversify(kek, ukm, s)
	if err != nil {
		return nil, nil, err
	}
	c, err := NewCipher(k, s)
	if err != nil {
		return nil, nil, err
	}
	enc = make([]byte, KeySize)
	if err := c.EncryptECB(enc, cek); err != nil {
		return nil, nil, err
	}
	if mac, err = IMIT(k, ukm, cek, s); err != nil {
		return nil, nil, err
	}
	return enc, mac, nil
}
