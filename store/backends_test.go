package store_test

import (
	"testing"

	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// TestBackends: every backend Open knows answers the one suite
// (storetest.Run) the same, on real redis-server processes: one server,
// one behind TLS alone, a Sentinel set, a three-master Cluster.
func TestBackends(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, storetest.Start(t).URL(), store.Options{})
	})
	t.Run("rediss", func(t *testing.T) {
		t.Parallel()
		x := storetest.NewTLS(t)
		srv := storetest.StartTLS(t, x.Cert, x.Key)
		storetest.Run(t, "rediss://"+srv.Addr, store.Options{CAFile: x.CA})
	})
	t.Run("redis+sentinel", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, storetest.StartSentinel(t).URL(), store.Options{})
	})
	t.Run("redis+cluster", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, storetest.StartCluster(t, 3).URL(), store.Options{})
	})
}
