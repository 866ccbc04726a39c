package store

import (
	"context"
	"encoding/base64"
	"errors"
	"time"
)

// Once marks kind and id as seen for ttl, and says whether this call was
// the first to: true when no mark was there (this one is now), false when
// one was, an error wrapping ErrUnavailable when the store does not answer
// (nothing is known then). It is for what the agents on a store must do at
// most once between them, such as opening a certificate login's key
// transport. The mark's key is the sealer's HMAC of kind and id, and its
// value is sealed: neither says what was seen.
func (s *Shared) Once(ctx context.Context, kind, id string, ttl time.Duration) (first bool, err error) {
	defer func() {
		if err == nil && !first {
			s.note("once", errSeen)
			return
		}
		s.note("once", err)
	}()
	key := s.prefix + "{" + s.sealer.Name(kind, id) + "}:once"
	mark := base64.StdEncoding.EncodeToString(s.sealer.Seal(kind, id, 0, nil))
	err = s.bounded(ctx, func(ctx context.Context) (err error) {
		first, err = s.b.take(ctx, key, mark, ttl)
		return err
	})
	return first, err
}

// Oncer is a store that can mark something done once between the agents
// on it (*Shared is one).
type Oncer interface {
	Once(ctx context.Context, kind, id string, ttl time.Duration) (bool, error)
}

var _ Oncer = (*Shared)(nil)

// errSeen is Once's result, for the metrics, when the mark was there.
var errSeen = errors.New("seen before")
