// Package refusedpin remembers, as a salted hash kept in memory, each PIN a
// token refused, so that the same PIN is never tried on it twice: a card
// locks after a few wrong tries.
package refusedpin

import (
	"crypto/rand"
	"crypto/sha256"
	"sync"
)

// Memory is the refused PINs by token. The zero value is not usable: use New.
type Memory struct {
	mu      sync.Mutex
	refused map[string][32]byte // token -> hash of the PIN it refused
	salt    [16]byte
}

// New returns an empty memory with a salt of its own.
func New() *Memory {
	m := &Memory{refused: map[string][32]byte{}}
	_, _ = rand.Read(m.salt[:])
	return m
}

func (m *Memory) hash(pin string) [32]byte { return sha256.Sum256(append(m.salt[:], pin...)) }

// Refused reports whether the token named key already refused pin.
func (m *Memory) Refused(key, pin string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.refused[key]
	return ok && h == m.hash(pin)
}

// Remember records the outcome of a login to the token named key with pin:
// refused, or accepted (which forgets an earlier refusal).
func (m *Memory) Remember(key, pin string, refused bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if refused {
		m.refused[key] = m.hash(pin)
	} else {
		delete(m.refused, key)
	}
}
