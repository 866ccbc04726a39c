package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

// formatAgent is an agent on the bed's store that reads up to newest and
// announces it, with announcements living ttl.
func (b *bed) formatAgent(t *testing.T, newest int, ttl time.Duration) *store.Shared {
	t.Helper()
	r := openStore(t, b.url, store.Options{Sealer: b.s, AnnounceTTL: ttl})
	store.ReadUpTo(r, newest)
	if err := <-r.Announce(); err != nil {
		t.Fatal(err)
	}
	return r
}

// format is the format of the record kept at oidc/crm, as Redis holds it.
func (b *bed) format(t *testing.T) int {
	t.Helper()
	v, err := b.raw.HGet(context.Background(), b.k, "v").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return int(v[0])
}

// eventually waits, for at most a minute, until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after a minute", what)
		}
	}
}

// TestFormatsFollowLiveAgents: an agent that reads format 3 writes 2 while
// an agent that reads only 2 is live, and 3 once it has left (withdrawn);
// the old agent then meets a record of format 3 with no agent that reads
// it and rewrites it live: it answers a FormatError (store_format_newer,
// not a sign-in, not ErrSealed), and a cache's Obtain neither makes a new
// value nor overwrites it. When an old agent is back (a rollback) while
// the new one runs, the new one writes 2 again and rewrites the record in
// 2 at the old one's request: it reads it, not as a rollback.
func TestFormatsFollowLiveAgents(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	old := b.formatAgent(t, 2, 3*time.Second)
	next := b.formatAgent(t, 3, 3*time.Second)
	if f := next.Formats(); f.Write != 2 || len(f.Read) != 3 || f.Agents["1,2"] != 1 || f.Agents["1,2,3"] != 1 {
		t.Fatalf("next, with an agent that reads 2 live: %+v, want it to write 2", f)
	}
	if err := put(t, next, "oidc", "crm", []byte("v1")); err != nil || b.format(t) != 2 {
		t.Fatalf("put: %v, format %d, want 2", err, b.format(t))
	}
	if v, err := old.Get(ctx, "oidc", "crm"); err != nil || string(v) != "v1" {
		t.Fatalf("old reads %q %v", v, err)
	}

	// The old agent leaves: the new one moves up.
	old.Withdraw()
	eventually(t, "writing 3", func() bool {
		put(t, next, "oidc", "crm", []byte("v2"))
		return b.format(t) == 3
	})
	was, _ := b.raw.HGet(ctx, b.k, "v").Result()
	var fe *store.FormatError
	_, err := old.Get(ctx, "oidc", "crm")
	if !errors.As(err, &fe) || fe.Format != 3 || fe.Reads != 2 || !errors.Is(err, errdefs.ErrStoreFormatNewer) || errors.Is(err, store.ErrSealed) ||
		err.Error() != "written by a newer signagent (format 3); this agent reads up to 2: finish the upgrade or roll back" {
		t.Fatalf("old meets format 3: %v", err)
	}
	made := false
	_, _, err = store.Obtain(ctx, old, "oidc", "crm", func([]byte) bool { return true },
		func(context.Context) ([]byte, time.Duration, error) { made = true; return []byte("made"), 0, nil })
	if !errors.Is(err, store.ErrFormatNewer) || made {
		t.Fatalf("Obtain over a newer record: %v, made %v", err, made)
	}
	if err := put(t, old, "oidc", "crm", []byte("over")); !errors.Is(err, store.ErrFormatNewer) {
		t.Fatalf("old writes over a newer record: %v", err)
	}
	if now, _ := b.raw.HGet(ctx, b.k, "v").Result(); now != was {
		t.Fatal("the newer record was changed by an agent that does not read it")
	}

	// A rollback: an agent that reads 2 is back while the new one runs.
	back := b.formatAgent(t, 2, 3*time.Second)
	v, err := back.Get(ctx, "oidc", "crm")
	if err != nil || string(v) != "v2" || b.format(t) != 2 {
		t.Fatalf("back reads %q %v (format %d), want v2 rewritten in format 2", v, err, b.format(t))
	}
	if f := next.Formats(); f.Write != 2 {
		t.Fatalf("next with an old agent back: %+v, want it to write 2", f)
	}
	if err := put(t, next, "oidc", "crm", []byte("v3")); err != nil || b.format(t) != 2 {
		t.Fatalf("put: %v, format %d", err, b.format(t))
	}
	if v, err := back.Get(ctx, "oidc", "crm"); err != nil || string(v) != "v3" {
		t.Fatalf("back reads %q %v", v, err)
	}
}

// TestAnnouncementExpires: an agent that reads only 2 announces and dies
// without renewing nor withdrawing: writers stay at 2 while its
// announcement lives, and move up to 3 once it has expired.
func TestAnnouncementExpires(t *testing.T) {
	b := newBed(t)
	const ttl = 2 * time.Second
	dead := b.formatAgent(t, 2, ttl)
	next := b.formatAgent(t, 3, ttl)
	store.Die(dead)
	if err := put(t, next, "oidc", "crm", []byte("v")); err != nil || b.format(t) != 2 {
		t.Fatalf("a moment after the old agent died: %v, format %d, want 2 (its announcement lives %v)", err, b.format(t), ttl)
	}
	eventually(t, "writing 3 once the dead agent's announcement expired", func() bool {
		put(t, next, "oidc", "crm", []byte("v"))
		return b.format(t) == 3
	})
	if f := next.Formats(); f.Write != 3 || f.Agents["1,2"] != 0 || f.Agents["1,2,3"] != 1 {
		t.Fatalf("%+v", f)
	}
}

// TestRollbackOverNewerRecords: every agent reads 3 and the records are at
// 3; then all of them are replaced at once by agents that read 2 (a
// rollback that does not keep one new agent): each call answers a
// FormatError (nobody signed out), nothing is overwritten nor made again;
// one agent of the newer release started again sweeps the records back
// into 2 unasked, with a higher generation, and the old agents read them.
func TestRollbackOverNewerRecords(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	next := b.formatAgent(t, 3, 3*time.Second)
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		if err := put(t, next, "oidc", id, []byte("rec-"+id)); err != nil {
			t.Fatal(err)
		}
	}
	next.Close()
	old := b.formatAgent(t, 2, 3*time.Second)
	for _, id := range ids {
		if _, err := old.Get(ctx, "oidc", id); !errors.Is(err, store.ErrFormatNewer) {
			t.Fatalf("%s: %v", id, err)
		}
	}
	again := b.formatAgent(t, 3, 3*time.Second)
	if f := again.Formats(); f.Write != 2 {
		t.Fatalf("a new agent next to an old one: %+v", f)
	}
	// It sweeps them back into 2 unasked.
	eventually(t, "every record rewritten in format 2", func() bool {
		for _, id := range ids {
			if raw, _ := b.raw.HGet(ctx, dataKey(b.s, "oidc", id), "v").Bytes(); raw[0] != 2 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		v, err := old.Get(ctx, "oidc", id)
		if err != nil || string(v) != "rec-"+id {
			t.Fatalf("%s: %q %v", id, v, err)
		}
		raw, _ := b.raw.HGet(ctx, dataKey(b.s, "oidc", id), "v").Bytes()
		if raw[0] != 2 {
			t.Fatalf("%s is of format %d", id, raw[0])
		}
	}
	// Rewritten with a higher generation: an agent that had read the
	// format 3 record does not take the rewritten one for a rollback.
	for _, id := range ids {
		if v, err := again.Get(ctx, "oidc", id); err != nil || string(v) != "rec-"+id {
			t.Fatalf("%s through the new agent: %q %v", id, v, err)
		}
	}
}

// TestNotANewerFormat: a value that starts with a byte past any format
// signagent will write, or is too short to be sealed, is no record (it
// does not open: ErrSealed), not one of a newer format; and a sign-in
// writes over it. One of a newer format is newer whether or not an agent
// that reads it is live (a rollback signs nobody out).
func TestNotANewerFormat(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	for _, v := range []string{"forged-by-someone", "\x03short", "\x11" + string(make([]byte, store.Overhead))} {
		b.raw.HSet(ctx, b.k, "v", v)
		if _, err := b.r.Get(ctx, "oidc", "crm"); !errors.Is(err, store.ErrSealed) || errors.Is(err, store.ErrFormatNewer) {
			t.Errorf("%q: %v", v, err)
		}
		if err := put(t, b.r, "oidc", "crm", []byte("signed-in")); err != nil {
			t.Errorf("a sign-in over %q: %v", v, err)
		}
	}
	for _, v := range []string{"\x03" + string(make([]byte, store.Overhead)), "\x10" + string(make([]byte, store.Overhead))} {
		b.raw.HSet(ctx, b.k, "v", v)
		if _, err := b.r.Get(ctx, "oidc", "crm"); !errors.Is(err, store.ErrFormatNewer) {
			t.Errorf("format %d, no agent that reads it live: %v", v[0], err)
		}
	}
}

// TestPutAfterConvert: a lease holder's Put reads a record of format 3,
// and before its write lands another agent rewrites that record in format
// 2 for an old agent (convert, which takes no lease) and the old agent
// reads it. The holder's write, with the generation it chose before the
// rewrite, must not land over it: the old agent would take it for a
// rollback. It reads again and writes over the rewritten record.
func TestPutAfterConvert(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	// Neither announces; each lists the live agents before every write
	// (an announcement's lifetime of 1ns).
	writer := openStore(t, b.url, store.Options{Sealer: b.s, AnnounceTTL: time.Nanosecond})
	store.ReadUpTo(writer, 3)
	conv := openStore(t, b.url, store.Options{Sealer: b.s, AnnounceTTL: time.Nanosecond})
	store.ReadUpTo(conv, 3)
	if err := put(t, writer, "oidc", "crm", []byte("v1")); err != nil || b.format(t) != 3 {
		t.Fatalf("put: %v, format %d, want 3 (no agent live)", err, b.format(t))
	}
	old := b.formatAgent(t, 2, 3*time.Second)
	store.BeforeWrite(writer, func() {
		store.Convert(conv, "oidc", "crm")
		if v, err := old.Get(ctx, "oidc", "crm"); err != nil || string(v) != "v1" || b.format(t) != 2 {
			t.Errorf("old reads the converted record: %q %v, format %d", v, err, b.format(t))
		}
	})
	if err := put(t, writer, "oidc", "crm", []byte("v2")); err != nil {
		t.Fatalf("put over a record converted meanwhile: %v", err)
	}
	if v, err := old.Get(ctx, "oidc", "crm"); err != nil || string(v) != "v2" {
		t.Fatalf("old reads %q %v, want v2", v, err)
	}
}

// calls is how many times Redis was asked to run cmd (inside scripts
// too), and how many of those it refused (ACL), from INFO commandstats.
func calls(t *testing.T, raw redis.UniversalClient, cmd string) (n, rejected int) {
	t.Helper()
	info := raw.Info(context.Background(), "commandstats").Val()
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":"); ok {
			for _, f := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "calls":
					n, _ = strconv.Atoi(v)
				case "rejected_calls":
					rejected, _ = strconv.Atoi(v)
				}
			}
		}
	}
	return n, rejected
}

// TestListRateLimited: the live agents are listed at most once a third of
// an announcement's lifetime, by a reader meeting a value of a format no
// live agent reads again and again, and by a writer whose lists fail (the
// store refuses them: here an ACL, standing for a store that is down),
// which writes the oldest format meanwhile. A list runs the announcement
// script, whose ZREMRANGEBYSCORE Redis counts.
func TestListRateLimited(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	reader := b.agent(t)
	store.ReadUpTo(reader, 2)
	before, _ := calls(t, b.raw, "zremrangebyscore")
	b.raw.HSet(ctx, b.k, "v", "\x03"+string(make([]byte, store.Overhead)))
	for range 10 {
		if _, err := reader.Get(ctx, "oidc", "crm"); !errors.Is(err, store.ErrFormatNewer) {
			t.Error(err)
		}
	}
	if n, _ := calls(t, b.raw, "zremrangebyscore"); n-before > 1 {
		t.Errorf("10 reads of a value of a format no one reads listed the agents %d times, want at most 1", n-before)
	}

	writer := b.agent(t)
	store.ReadUpTo(writer, 3)
	if err := b.raw.Do(ctx, "ACL", "SETUSER", "default", "-zremrangebyscore").Err(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := put(t, writer, "oidc", "crm", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if b.format(t) != 2 {
			t.Fatalf("written in format %d with the live agents unknown, want 2", b.format(t))
		}
	}
	if _, rejected := calls(t, b.raw, "zremrangebyscore"); rejected != 1 {
		t.Errorf("10 writes tried to list the agents %d times while the store refused, want 1", rejected)
	}
}

// TestAnnounceDoesNotWait: Announce returns while the store does not
// answer (paused), its first announcement made in the background once it
// does; and Withdraw, at the same time as Announce, stops it (run with
// -race: the two share the announcing goroutine's channels).
func TestAnnounceDoesNotWait(t *testing.T) {
	srv := storetest.Start(t)
	s, _ := store.NewSealer(key(1))
	r := openStore(t, srv.URL(), store.Options{Sealer: s, Timeout: time.Minute})
	srv.Pause()
	first := r.Announce() // with the store's timeout of a minute
	select {
	case err := <-first:
		t.Fatalf("announced to a paused store: %v", err)
	default:
	}
	srv.Resume()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if f := r.Formats(); len(f.Agents) != 1 {
		t.Fatalf("after the first announcement: %+v", f)
	}
	for range 20 {
		r := openStore(t, srv.URL(), store.Options{Sealer: s})
		go r.Announce()
		r.Withdraw()
	}
}
