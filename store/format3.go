package store

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
)

// format3 is a test-only record format: no release writes it. A build
// with the tag signagent_format3 reads and writes it (formats_newest3.go),
// so that a rolling upgrade to a format today's release does not read,
// and the rollback from it, are tested with two real builds on one store.
// It is what a next format would need to be for a rollback to keep
// everyone signed in: it carries its identity and its expiry, sealed, so
// that an agent that reads it can turn it back into an older format from
// its key name alone (convert.go), for an agent that reads only that.
//
//	3: version, key id (4), generation (8), expiry (8: Unix ms, 0: none),
//	   nonce (12), ciphertext and tag of the identity's length (4), the
//	   identity and the value; associated data: the key name (an HMAC of
//	   kind and identity, checked against the identity once opened), the
//	   version, the generation and the expiry.
const format3 = 3

// overhead3 is what format 3 adds to a value of identity id.
func overhead3(id string) int { return Overhead + 8 + 4 + len(id) }

func ad3(name string, gen uint64, expiry int64) []byte {
	var b bytes.Buffer
	b.WriteString("signagent store\x00")
	binary.Write(&b, binary.BigEndian, uint32(len(name)))
	b.WriteString(name)
	b.WriteByte(format3)
	binary.Write(&b, binary.BigEndian, gen)
	binary.Write(&b, binary.BigEndian, expiry)
	return b.Bytes()
}

// seal3 seals plain for kind and id in format 3, expiring at expiry (Unix
// ms, 0: none).
func (s *Sealer) seal3(kind, id string, gen uint64, expiry int64, plain []byte) []byte {
	nonce := make([]byte, s.cur.aead.NonceSize())
	if _, err := io.ReadFull(rand.Reader, nonce); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	out := append([]byte{format3}, s.cur.id[:]...)
	out = binary.BigEndian.AppendUint64(out, gen)
	out = binary.BigEndian.AppendUint64(out, uint64(expiry))
	out = append(out, nonce...)
	inner := binary.BigEndian.AppendUint32(nil, uint32(len(id)))
	inner = append(append(inner, id...), plain...)
	return s.cur.aead.Seal(out, nonce, inner, ad3(s.Name(kind, id), gen, expiry))
}

// open3 opens a format 3 value kept under name (Name's, for some kind and
// identity): the identity, the value, its generation and expiry. The
// identity is checked against name, so that a value moved to another
// key does not open.
func (s *Sealer) open3(kind, name string, sealed []byte) (id string, plain []byte, gen uint64, expiry int64, err error) {
	const head = 1 + 4 + 8 + 8
	if len(sealed) < head {
		return "", nil, 0, 0, fmt.Errorf("%w: it is too short", ErrSealed)
	}
	var kid [4]byte
	copy(kid[:], sealed[1:5])
	gen = binary.BigEndian.Uint64(sealed[5:13])
	expiry = int64(binary.BigEndian.Uint64(sealed[13:21]))
	rest := sealed[head:]
	for _, k := range append([]sealKey{s.cur}, s.old...) {
		if k.id != kid {
			continue
		}
		n := k.aead.NonceSize()
		if len(rest) < n {
			return "", nil, 0, 0, fmt.Errorf("%w: it is too short", ErrSealed)
		}
		inner, err := k.aead.Open(nil, rest[:n], rest[n:], ad3(name, gen, expiry))
		if err != nil || len(inner) < 4 {
			return "", nil, 0, 0, fmt.Errorf("%w: it fails authentication (tampered, or moved from another identity)", ErrSealed)
		}
		l := binary.BigEndian.Uint32(inner)
		if uint64(l) > uint64(len(inner)-4) {
			return "", nil, 0, 0, fmt.Errorf("%w: it fails authentication (tampered, or moved from another identity)", ErrSealed)
		}
		id, plain = string(inner[4:4+l]), inner[4+l:]
		if s.Name(kind, id) != name {
			return "", nil, 0, 0, fmt.Errorf("%w: it fails authentication (tampered, or moved from another identity)", ErrSealed)
		}
		return id, plain, gen, expiry, nil
	}
	return "", nil, 0, 0, fmt.Errorf("%w: it was sealed with key %x, which is not in the key file", ErrSealed, kid)
}
