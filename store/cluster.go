package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// openCluster is the backend of redis+cluster://: the records spread over
// a Redis Cluster's masters by their key names' hash tags. What differs
// from one server is only where a command goes, and go-redis's
// ClusterClient knows that: it maps slots to masters, follows MOVED and
// ASK while slots are resharded, and reloads the map after a failover.
// An identity's record and lease share a hash tag, so the fenced write
// (a script over both) runs on the one master that holds them; the
// replicas a write waits for are that master's; the store answers when
// every master does.
func openCluster(raw string, o Options, timeout time.Duration) (backend, error) {
	uo, err := redisOptions(raw, o, timeout)
	if err != nil {
		return nil, err
	}
	co := uo.Cluster()
	co.MaxRedirects = 3 // a slot moved while it is read or written: at most a resharding's MOVED and ASK
	c := redis.NewClusterClient(co)
	b := newRedisBackend(c, o, timeout)
	b.primary = c.MasterForKey
	b.nodes = c.ForEachMaster
	b.pingAll = func(ctx context.Context) error {
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
	}
	return b, nil
}
