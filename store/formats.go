package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/signagent/signagent/errdefs"
)

// Record formats. Every agent on a store announces there the formats it
// reads (a member of one sorted set, with its lifetime as its score,
// renewed while the agent runs and removed when it stops), and every
// writer writes the highest format that every live agent reads: a format
// moves up only once every live agent reads it, and down again as soon
// as one that does not is back (a rollback). docs/upgrading.md is the
// contract this keeps.
//
// baseFormat is the format of release a5cdd2a, which reads formats 1 and
// 2, writes 2 and announces nothing: an agent that does not announce is
// taken to read up to baseFormat, and no writer writes below it, so that
// every release since reads what every other writes.
const baseFormat = formatVersion

// maxFormat is the highest first byte taken for a format: a value that
// starts with a higher one (or is shorter than any sealed value) is no
// record of any release (forged, or not signagent's), not a newer one, and
// does not open (ErrSealed).
const maxFormat = 16

// DefaultAnnounceTTL is how long an agent's announcement lives without
// renewal (renewed every third of it): an agent killed without removing
// it holds writers at its formats this long.
const DefaultAnnounceTTL = 15 * time.Second

// withdrawSweep bounds the sweep an agent that reads a newer format makes
// as it stops (Withdraw), whatever the number of records.
const withdrawSweep = 5 * time.Second

// ErrFormatNewer is a record of a format newer than this agent reads: it
// is neither used nor overwritten, and no sign-in is advised (the record
// is good; the agent is old). *FormatError says which.
var ErrFormatNewer = errdefs.New(errdefs.ErrStoreFormatNewer, "a record in the shared store is of a format newer than this agent reads")

// FormatError is a record of format Format met by an agent that reads up
// to Reads.
type FormatError struct{ Format, Reads int }

// Error says the record is of a newer format than this agent reads, and
// what to do.
func (e *FormatError) Error() string {
	return fmt.Sprintf("written by a newer signagent (format %d); this agent reads up to %d: finish the upgrade or roll back", e.Format, e.Reads)
}

// Is makes a FormatError ErrFormatNewer and of its kind.
func (e *FormatError) Is(target error) bool {
	return target == ErrFormatNewer || target == errdefs.ErrStoreFormatNewer
}

// Formats is what a store's formats are now, as this agent sees them.
type Formats struct {
	// Read are the formats this agent reads.
	Read []int `json:"read"`
	// Write is the format it writes now: the highest every live agent
	// reads.
	Write int `json:"write"`
	// Agents counts the live agents announced on the store by the formats
	// they read ("1,2,3"), this one included; agents of a5cdd2a announce
	// nothing and are not counted.
	Agents map[string]int `json:"agents,omitempty"`
}

// BuildFormats are the formats this build reads, and the one it writes
// until it has seen which agents are live (what `signagent version`
// says).
func BuildFormats() Formats { return Formats{Read: readList(newestFormat), Write: baseFormat} }

func readList(newest int) []int {
	var out []int
	for f := formatV1; f <= newest; f++ {
		out = append(out, f)
	}
	return out
}

// formats is a Shared store's side of the announcements.
type formats struct {
	newest int           // the newest format this process reads
	id     string        // this process's announcement
	ttl    time.Duration // an announcement's lifetime
	write  atomic.Int32  // the format written now
	listAt atomic.Int64  // when the live agents were last listed (Unix ns; 0: never)
	tried  atomic.Int64  // when a list was last tried, listed or not (Unix ns; 0: never)
	// sweepDue is set when the write format went down: records of a
	// newer format are to be rewritten (convert.go).
	sweepDue atomic.Bool
	agents   atomic.Pointer[map[string]int]

	mu        sync.Mutex
	stop      chan struct{} // closed to stop announcing
	done      chan struct{} // closed when the announcing has stopped
	announced bool
}

func (f *formats) init(ttl time.Duration) {
	f.newest = newestFormat
	f.ttl = ttl
	if f.ttl <= 0 {
		f.ttl = DefaultAnnounceTTL
	}
	b := make([]byte, 8)
	rand.Read(b)
	f.id = hex.EncodeToString(b)
	f.write.Store(baseFormat)
}

// member is this process's announcement: its id and the formats it reads.
func (f *formats) member() string {
	var csv []string
	for _, n := range readList(f.newest) {
		csv = append(csv, strconv.Itoa(n))
	}
	return f.id + " " + strings.Join(csv, ",")
}

// writeFor is the highest format up to newest that every live agent
// (members, as announced) reads, and never below baseFormat.
func writeFor(newest int, members []string) int {
	reads := make([][]string, 0, len(members))
	for _, m := range members {
		_, csv, _ := strings.Cut(m, " ")
		reads = append(reads, strings.Split(csv, ","))
	}
	for w := newest; w > baseFormat; w-- {
		all := true
		for _, r := range reads {
			all = all && slices.Contains(r, strconv.Itoa(w))
		}
		if all {
			return w
		}
	}
	return baseFormat
}

func (s *Shared) announcementsKey() string { return s.prefix + "{formats}:agents" }
func (s *Shared) requestsKey() string      { return s.prefix + "{formats}:older" }

// list announces this process (when it announces; else only reads) and
// lists the live agents: the write format follows.
func (s *Shared) list(ctx context.Context, announce bool) error {
	member := ""
	if announce {
		member = s.fmts.member()
	}
	now := time.Now().UnixNano()
	s.fmts.tried.Store(now)
	var members []string
	err := s.bounded(ctx, func(ctx context.Context) (err error) {
		members, err = s.b.announce(ctx, s.announcementsKey(), member, s.fmts.ttl)
		return err
	})
	if err != nil {
		return err
	}
	counts := map[string]int{}
	for _, m := range members {
		_, csv, _ := strings.Cut(m, " ")
		counts[csv]++
	}
	s.fmts.agents.Store(&counts)
	w := int32(writeFor(s.fmts.newest, members))
	first := s.fmts.listAt.Load() == 0
	if was := s.fmts.write.Swap(w); announce && (w < was || first && w < int32(s.fmts.newest)) {
		// An older agent is back (or was there when this one came): the
		// announcing loop sweeps.
		s.fmts.sweepDue.Store(true)
	}
	s.fmts.listAt.Store(now)
	return nil
}

// listDue says whether the live agents are to be listed again: the last
// try, listed or not, is a third of an announcement's lifetime old (a
// store that is down is not asked again on every call).
func (s *Shared) listDue() bool {
	return time.Since(time.Unix(0, s.fmts.tried.Load())) > s.fmts.ttl/3
}

// writeFormat is the format a write uses now. A process that does not
// announce (a command) lists the live agents before its first write and
// again once the list is a third of an announcement's lifetime old; one
// that cannot (the last try failed) writes baseFormat, which every agent
// reads.
func (s *Shared) writeFormat(ctx context.Context) int {
	if s.fmts.newest == baseFormat {
		return baseFormat
	}
	if s.listDue() {
		s.list(ctx, s.isAnnouncing())
	}
	if at := s.fmts.listAt.Load(); at == 0 || at < s.fmts.tried.Load() {
		return baseFormat
	}
	return int(s.fmts.write.Load())
}

// someoneReads says whether a live agent announced reading format f.
func (s *Shared) someoneReads(f int) bool {
	p := s.fmts.agents.Load()
	if p == nil {
		return false
	}
	for csv := range *p {
		if slices.Contains(strings.Split(csv, ","), strconv.Itoa(f)) {
			return true
		}
	}
	return false
}

// Formats says the formats read and written now, and the live agents.
func (s *Shared) Formats() Formats {
	f := Formats{Read: readList(s.fmts.newest), Write: int(s.fmts.write.Load())}
	if p := s.fmts.agents.Load(); p != nil {
		f.Agents = *p
	}
	return f
}

// Announce makes this process one of the store's live agents: it says
// the formats it reads now and then every third of the announcement's
// lifetime until Withdraw or Close, in a goroutine of its own (a store
// that does not answer delays no one). The channel receives the first
// announcement's result (the error is the store's, when it does not
// answer: the agent goes on, and announces when it does). An agent that
// reads a format newer than baseFormat also turns records of that format
// back into the write format when an agent that reads only older ones
// asks (convert.go). Announce is called once; again is a no-op (its
// channel receives nil).
func (s *Shared) Announce() <-chan error {
	first := make(chan error, 1)
	s.fmts.mu.Lock()
	if s.fmts.announced {
		s.fmts.mu.Unlock()
		first <- nil
		return first
	}
	s.fmts.announced = true
	stop, done := make(chan struct{}), make(chan struct{})
	s.fmts.stop, s.fmts.done = stop, done
	s.fmts.mu.Unlock()
	go s.announcing(stop, done, first)
	return first
}

func (s *Shared) announcing(stop, done chan struct{}, first chan<- error) {
	defer close(done)
	// Its calls end when it is stopped: Withdraw waits for it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	first <- s.list(ctx, true)
	renew := time.NewTicker(s.fmts.ttl / 3)
	defer renew.Stop()
	var convert <-chan time.Time
	if s.fmts.newest > baseFormat {
		t := time.NewTicker(convertEvery)
		defer t.Stop()
		convert = t.C
	}
	for {
		select {
		case <-stop:
			return
		case <-renew.C:
			s.list(ctx, true)
		case <-convert:
			s.convertRequested(ctx)
		}
		if s.fmts.sweepDue.Swap(false) {
			s.sweep(ctx)
		}
	}
}

// Withdraw stops announcing and removes this process's announcement at
// once (the agent is stopping: writers need not wait for it to expire).
func (s *Shared) Withdraw() {
	s.fmts.mu.Lock()
	if !s.fmts.announced || s.fmts.stop == nil {
		s.fmts.mu.Unlock()
		return
	}
	stop, done := s.fmts.stop, s.fmts.done
	s.fmts.stop = nil
	s.fmts.mu.Unlock()
	close(stop)
	<-done
	// Records this agent wrote in a newer format before it saw an older
	// agent back are rewritten before it leaves, within withdrawSweep in
	// all (the rest are rewritten as the older agents ask for them, while
	// an agent that reads them is live).
	ctx, cancel := context.WithTimeout(context.Background(), withdrawSweep)
	defer cancel()
	if s.list(ctx, true) == nil {
		s.sweep(ctx)
	}
	s.bounded(context.Background(), func(ctx context.Context) error {
		return s.b.withdraw(ctx, s.announcementsKey(), s.fmts.member())
	})
}
