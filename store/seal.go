// Package store is the record store the schemes' caches take (Records and
// Lease, with Obtain and DeleteIf over any: records.go, lease.go), and the
// shared one: what several agents share (OpenID Connect records, trusted
// sessions, legacy tokens) kept in Redis, a Sentinel set's master or a
// Redis Cluster (the backend Open chooses by the URL), sealed: every value is
// AES-256-GCM under the operator's key with its kind, identity and
// generation as associated data, and every key name is an HMAC of the kind
// and identity, so that nothing in Redis reads in clear. Writes happen
// under a lease (one holder per identity across all agents) and are fenced
// by it; a value is read only when it is within a bound, and refused when
// its generation is older than one this process has seen.
package store

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/safefile"
)

// Errors of the store. A sealed value that does not open is ErrSealed:
// it is never used (the caller treats the record as absent).
var (
	ErrBadKey   = errdefs.New(errdefs.ErrNotConfigured, "bad store key")
	ErrSealed   = errors.New("a stored value does not open with the store key")
	ErrNotFound = errors.New("not in the store")
	ErrBadURL   = errdefs.New(errdefs.ErrInvalidInput, "bad store URL")
	// ErrUnavailable is a store that does not answer (in time).
	ErrUnavailable = errdefs.New(errdefs.ErrStoreUnavailable, "the shared store is unavailable")
	// ErrFenced is a write refused because this agent no longer holds the
	// identity's lease (it expired while the agent was paused, and another
	// agent may have written since).
	ErrFenced = errors.New("the write was refused: this agent no longer holds the lease")
)

// Values that open but are not used either. Each is ErrSealed too
// (errors.Is), so that a caller that knows only ErrSealed treats it as a
// value that does not open: never used, the record taken as absent.
var (
	// ErrTooLarge is a stored value longer than the store's bound
	// (Options.MaxValue): refused in Redis before it is sent, never read.
	ErrTooLarge error = &unusable{"a stored value is over the store's size bound"}
	// ErrRollback is a stored value of an older generation than one this
	// process has already read or written for the same identity: an older
	// record put back by someone with write access to Redis.
	ErrRollback error = &unusable{"a stored value is older than one this agent has already seen"}
)

// unusable is a kind of ErrSealed with its own message.
type unusable struct{ msg string }

func (e *unusable) Error() string        { return e.msg }
func (e *unusable) Is(target error) bool { return target == ErrSealed }

// The first byte of every sealed value is its format version:
//
//	1: version, key id (4), nonce (12), ciphertext and tag; associated
//	   data ad(kind, id). Written before generations; still read, as
//	   generation 0.
//	2: version, key id (4), generation (8, big-endian), nonce (12),
//	   ciphertext and tag; associated data ad(kind, id), the version and
//	   the generation: the generation is in clear (Redis already counts
//	   writes) but cannot be changed without the key.
const (
	formatV1      = 1
	formatVersion = 2
)

// keyLen is a store key's length: AES-256.
const keyLen = 32

// Sealer seals and opens values, and names keys, with the store key.
type Sealer struct {
	cur  sealKey
	old  []sealKey // read only: a rotated-out key
	name []byte    // HMAC key for key names, derived from the current key
}

type sealKey struct {
	id   [4]byte
	aead cipher.AEAD
}

func newSealKey(raw []byte) (sealKey, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return sealKey{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return sealKey{}, err
	}
	var k sealKey
	sum := sha256.Sum256(append([]byte("signagent store key id\x00"), raw...))
	copy(k.id[:], sum[:4])
	k.aead = aead
	return k, nil
}

// NewSealer makes a Sealer from the current key and any older keys still
// to be read.
func NewSealer(current []byte, older ...[]byte) (*Sealer, error) {
	if len(current) != keyLen {
		return nil, fmt.Errorf("%w: a key is %d bytes, not %d", ErrBadKey, keyLen, len(current))
	}
	cur, err := newSealKey(current)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	// Key names come from a subkey of the oldest key in the file (its last
	// line), so that the AES keys are used for one job only and a rotation
	// (a new key on the first line, the old ones kept below) renames
	// nothing: every agent finds the same records and the same leases
	// whether or not it has the new file yet.
	oldest := current
	if len(older) > 0 {
		oldest = older[len(older)-1]
	}
	name, err := hkdf.Key(sha256.New, oldest, nil, "signagent store key names", 32)
	if err != nil {
		return nil, err
	}
	s := &Sealer{cur: cur, name: name}
	for _, o := range older {
		if len(o) != keyLen {
			return nil, fmt.Errorf("%w: a key is %d bytes, not %d", ErrBadKey, keyLen, len(o))
		}
		k, err := newSealKey(o)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
		}
		s.old = append(s.old, k)
	}
	return s, nil
}

// ad is the associated data that binds a value to its kind and identity:
// a value copied under another identity's name does not open.
func ad(kind, id string) []byte {
	var b bytes.Buffer
	b.WriteString("signagent store\x00")
	binary.Write(&b, binary.BigEndian, uint32(len(kind)))
	b.WriteString(kind)
	binary.Write(&b, binary.BigEndian, uint32(len(id)))
	b.WriteString(id)
	return b.Bytes()
}

// adGen is a format 2 value's associated data: ad(kind, id), the version
// and the generation.
func adGen(kind, id string, gen uint64) []byte {
	return binary.BigEndian.AppendUint64(append(ad(kind, id), formatVersion), gen)
}

// Overhead is what sealing adds to a value's length.
const Overhead = 1 + 4 + 8 + 12 + 16

// Seal encrypts plain for kind and id at generation gen: version, key id,
// generation, nonce, ciphertext.
func (s *Sealer) Seal(kind, id string, gen uint64, plain []byte) []byte {
	nonce := make([]byte, s.cur.aead.NonceSize())
	if _, err := io.ReadFull(rand.Reader, nonce); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	out := make([]byte, 0, Overhead+len(plain))
	out = append(append(out, formatVersion), s.cur.id[:]...)
	out = binary.BigEndian.AppendUint64(out, gen)
	out = append(out, nonce...)
	return s.cur.aead.Seal(out, nonce, plain, adGen(kind, id, gen))
}

// Open decrypts a value Seal made for kind and id, with the current key or
// an older one, and returns it with its generation (0 for a value of
// format 1, sealed before generations). Anything else (tampered, moved to
// another identity, its generation changed, sealed with a key not in the
// file, of another format version) is ErrSealed, and the error holds
// nothing of the value.
func (s *Sealer) Open(kind, id string, sealed []byte) (plain []byte, gen uint64, err error) {
	if len(sealed) < 1+4 {
		return nil, 0, fmt.Errorf("%w: it is too short", ErrSealed)
	}
	version, rest := sealed[0], sealed[5:]
	var data []byte
	switch version {
	case formatV1:
		data = ad(kind, id)
	case formatVersion:
		if len(rest) < 8 {
			return nil, 0, fmt.Errorf("%w: it is too short", ErrSealed)
		}
		gen, rest = binary.BigEndian.Uint64(rest), rest[8:]
		data = adGen(kind, id, gen)
	default:
		return nil, 0, fmt.Errorf("%w: format version %d is not one this signagent reads (%d and %d)", ErrSealed, version, formatV1, formatVersion)
	}
	var kid [4]byte
	copy(kid[:], sealed[1:5])
	for _, k := range append([]sealKey{s.cur}, s.old...) {
		if k.id != kid {
			continue
		}
		n := k.aead.NonceSize()
		if len(rest) < n {
			return nil, 0, fmt.Errorf("%w: it is too short", ErrSealed)
		}
		plain, err := k.aead.Open(nil, rest[:n], rest[n:], data)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: it fails authentication (tampered, or moved from another identity)", ErrSealed)
		}
		return plain, gen, nil
	}
	return nil, 0, fmt.Errorf("%w: it was sealed with key %x, which is not in the key file", ErrSealed, kid)
}

// Name is the key name for kind and id: an HMAC, so that no phone, login,
// profile name or token appears in Redis.
func (s *Sealer) Name(kind, id string) string {
	m := hmac.New(sha256.New, s.name)
	m.Write(ad(kind, id))
	return kind + ":" + hex.EncodeToString(m.Sum(nil))
}

// LoadKeyFile reads a store key file: the current key on its first line,
// 64 hexadecimal characters (256 bits), then any older keys still to be
// read, one per line (# comments and blank lines ignored). The last line
// names the records: keep it when rotating. The file must
// be a regular file readable by its owner alone.
func LoadKeyFile(path string) (*Sealer, error) {
	b, err := safefile.ReadSecret(path, 4096, 0o077)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := hex.DecodeString(line)
		if err != nil || len(k) != keyLen {
			return nil, fmt.Errorf("%w: %s line %d is not 64 hexadecimal characters (make one with signagent store-key --out FILE)", ErrBadKey, path, n)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key (make one with signagent store-key --out FILE)", ErrBadKey, path)
	}
	return NewSealer(keys[0], keys[1:]...)
}

// NewKeyFile writes a new random key to path (0600, never over an
// existing file).
func NewKeyFile(path string) error {
	k := make([]byte, keyLen)
	if _, err := io.ReadFull(rand.Reader, k); err != nil {
		return err
	}
	// O_EXCL: an existing file (the key of sealed values) is never
	// replaced, not even by a race.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists; a store key is never overwritten (the values sealed with it would be lost): choose another file", path)
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(hex.EncodeToString(k) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}
