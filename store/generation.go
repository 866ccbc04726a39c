package store

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"time"
)

// generations is, for each identity this process has read or written, the
// highest generation it has seen there: a value of a lower generation is
// an older record put back in Redis (a rollback: its one-time refresh
// token may be spent already, and presenting it again makes the provider
// revoke the grant), and is not used.
//
// A generation is one more than the highest of what this process has seen
// and what the record holds when it is written (read under the lease, so
// no other agent writes in between), and at least the writer's clock in
// microseconds: a record written after the last one was deleted or
// expired, by an agent that never saw it, still has a higher generation
// than the one it replaces unless the agents' clocks differ by more than
// the time between the two writes.
//
// What it cannot see: a process that has not read the newer record (one
// just started, the CLI, an agent that never served the identity) takes
// the older one as current; the lease and the fence do not stop a Redis
// writer, who needs neither. An entry is 16 bytes of key and 8 of
// generation, kept for the process's life.
type generations struct {
	mu   sync.Mutex
	seen map[[16]byte]uint64
}

func genKey(data string) [16]byte {
	sum := sha256.Sum256([]byte(data))
	return [16]byte(sum[:16])
}

// highest is the highest generation seen for data's identity (0: none).
func (g *generations) highest(data string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen[genKey(data)]
}

// check refuses gen, read from data, when it is lower than floor (what
// was highest before the read was sent: a write this process saw after
// sending it may be newer than what the read found, and is no rollback);
// otherwise it raises the highest to gen.
func (g *generations) check(data string, floor, gen uint64) error {
	if gen < floor {
		return fmt.Errorf("%w: generation %d, and this agent has seen %d (an older record put back in the store?); it is not used", ErrRollback, gen, floor)
	}
	g.raise(data, gen)
	return nil
}

// raise makes gen the highest seen for data's identity if it is higher.
func (g *generations) raise(data string, gen uint64) {
	if gen == 0 {
		return // a value sealed before generations: nothing to remember
	}
	k := genKey(data)
	g.mu.Lock()
	defer g.mu.Unlock()
	if gen > g.seen[k] {
		if g.seen == nil {
			g.seen = map[[16]byte]uint64{}
		}
		g.seen[k] = gen
	}
}

// next is the generation of a write to data's identity whose record now
// holds generation cur (0: none, or none that opens).
func (g *generations) next(data string, cur uint64, now time.Time) uint64 {
	return max(g.highest(data)+1, cur+1, uint64(now.UnixMicro()))
}
