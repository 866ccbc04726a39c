package store

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrNotScanned is KeyCheck's answer for a store it does not look
// through (Redis Cluster, whose keys are on several masters).
var ErrNotScanned = errors.New("this kind of store is not looked through")

// KeyCheck looks at up to n records the store holds under the prefix
// (SCAN and GET: it changes nothing) and counts those sealed with a key
// that is not in the key file: records an agent with this file cannot
// open (names come from the key too, so such records are never found,
// only missed). looked is how many records it read.
func (s *Shared) KeyCheck(ctx context.Context, n int) (looked, foreign int, err error) {
	rb, ok := s.b.(*redisBackend)
	if !ok {
		return 0, 0, ErrNotScanned
	}
	if _, isCluster := rb.rdb.(*redis.ClusterClient); isCluster {
		return 0, 0, ErrNotScanned
	}
	err = s.bounded(ctx, func(ctx context.Context) error {
		iter := rb.rdb.Scan(ctx, 0, s.prefix+"{*}", 100).Iterator()
		for looked < n && iter.Next(ctx) {
			key := iter.Val()
			if !strings.HasSuffix(key, "}") { // a lease, or anything else
				continue
			}
			v, err := rb.get(ctx, key, s.maxValue)
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrSealed) || errors.Is(err, ErrTooLarge) {
				continue // gone since the scan, or no record
			}
			if err != nil {
				return err
			}
			looked++
			if !s.sealer.knows(v) {
				foreign++
			}
		}
		return iter.Err()
	})
	if err != nil && !errors.Is(err, ErrUnavailable) {
		err = rb.unavailable(err)
	}
	return looked, foreign, err
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
