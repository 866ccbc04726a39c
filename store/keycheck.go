package store

import (
	"context"
	"errors"
)

// KeyCheck looks at up to n records the store holds under the prefix
// (SCAN, on every node, and GET: it changes nothing) and counts those
// sealed with a key that is not in the key file: records an agent with
// this file cannot open (names come from the key too, so such records are
// never found, only missed). looked is how many records it read.
func (s *Shared) KeyCheck(ctx context.Context, n int) (looked, foreign int, err error) {
	keys, err := s.records(ctx, n)
	if err != nil {
		return 0, 0, err
	}
	for _, key := range keys {
		v, err := s.read(ctx, key)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrSealed) {
			continue // gone since the scan, or no record (too large too)
		}
		if err != nil {
			return looked, foreign, err
		}
		looked++
		if !s.sealer.knows(v) {
			foreign++
		}
	}
	return looked, foreign, nil
}

// knows says whether sealed was sealed with one of the file's keys (its
// key id; the value is not opened).
func (s *Sealer) knows(sealed []byte) bool {
	if len(sealed) < 5 {
		return false
	}
	for _, k := range append([]sealKey{s.cur}, s.old...) {
		if string(k.id[:]) == string(sealed[1:5]) {
			return true
		}
	}
	return false
}
