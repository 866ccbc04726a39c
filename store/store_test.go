package store_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/signagent/signagent/store"
	"github.com/signagent/signagent/store/storetest"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func TestSealOpen(t *testing.T) {
	t.Parallel()
	s, err := store.NewSealer(key(1))
	if err != nil {
		t.Fatal(err)
	}
	v := s.Seal("oidc", "crm", 7, []byte("the record"))
	if bytes.Contains(v, []byte("the record")) {
		t.Fatal("sealed value holds the plain text")
	}
	if len(v) != len("the record")+store.Overhead {
		t.Fatalf("sealed: %d bytes, want %d more than the record", len(v), store.Overhead)
	}
	if p, gen, err := s.Open("oidc", "crm", v); err != nil || string(p) != "the record" || gen != 7 {
		t.Fatalf("%q %d %v", p, gen, err)
	}
	if bytes.Equal(v, s.Seal("oidc", "crm", 7, []byte("the record"))) {
		t.Fatal("two seals are equal: the nonce is not fresh")
	}
	tampered := bytes.Clone(v)
	tampered[len(tampered)-1] ^= 1
	future := bytes.Clone(v)
	future[0] = 9
	// The generation (bytes 5-12, in clear) cannot be changed: it is
	// authenticated with the value.
	regen := bytes.Clone(v)
	regen[12]++
	// Nor can a value be passed off as one of format 1 (no generation).
	asV1 := append([]byte{1}, v[1:5]...)
	asV1 = append(asV1, v[13:]...)
	other, _ := store.NewSealer(key(2))
	for name, tc := range map[string]struct {
		s        *store.Sealer
		kind, id string
		v        []byte
		want     string
	}{
		"tampered":            {s, "oidc", "crm", tampered, "fails authentication"},
		"moved to another id": {s, "oidc", "other", v, "fails authentication"},
		"moved to a kind":     {s, "legacy", "crm", v, "fails authentication"},
		"unknown key":         {other, "oidc", "crm", v, "not in the key file"},
		"future format":       {s, "oidc", "crm", future, "format version 9"},
		"generation changed":  {s, "oidc", "crm", regen, "fails authentication"},
		"made format 1":       {s, "oidc", "crm", asV1, "fails authentication"},
		"garbage":             {s, "oidc", "crm", []byte("x"), "too short"},
		"truncated":           {s, "oidc", "crm", v[:10], "too short"},
	} {
		_, _, err := tc.s.Open(tc.kind, tc.id, tc.v)
		if !errors.Is(err, store.ErrSealed) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "record") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Rotation: a file with the new key first and the old one after reads
	// both and writes with the new.
	rotated, _ := store.NewSealer(key(2), key(1))
	if p, _, err := rotated.Open("oidc", "crm", v); err != nil || string(p) != "the record" {
		t.Fatalf("rotated key: %q %v", p, err)
	}
	if _, _, err := s.Open("oidc", "crm", rotated.Seal("oidc", "crm", 1, []byte("new"))); err == nil {
		t.Fatal("the old key opened what the new one sealed")
	}
	// A value of format 1, sealed by signagent before generations (these
	// bytes were written by it, with key(1)), still opens: generation 0.
	v1, _ := hex.DecodeString("01e3d7ebe992a5ac5357df148bb29581c1d147afc6c307fac4f8834d19036f74d91f6c7a741134ff29a7184680fcb55eb629b8fea881ae3cabd6e05bc9743727428e0b58034e25c66609c0dc96626bc2")
	if p, gen, err := s.Open("oidc", "crm", v1); err != nil || string(p) != "a record sealed by signagent before generations" || gen != 0 {
		t.Fatalf("format 1: %q %d %v", p, gen, err)
	}
	if _, _, err := s.Open("oidc", "other", v1); !errors.Is(err, store.ErrSealed) {
		t.Fatalf("format 1 moved to another identity: %v", err)
	}
	if rotated.Name("oidc", "crm") != s.Name("oidc", "crm") {
		t.Fatal("a rotation renamed the records")
	}
	if n := s.Name("oidc", "crm"); strings.Contains(n, "crm") || n == s.Name("oidc", "crm2") || n != s.Name("oidc", "crm") {
		t.Fatalf("names: %q", n)
	}
}

func TestKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "store.key")
	if err := store.NewKeyFile(p); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if _, err := store.LoadKeyFile(p); err != nil {
		t.Fatal(err)
	}
	if err := store.NewKeyFile(p); err == nil || !strings.Contains(err.Error(), "never overwritten") {
		t.Fatalf("over an existing key: %v", err)
	}
	good := hex.EncodeToString(key(7))
	for name, tc := range map[string]struct {
		body string
		mode os.FileMode
		want string
	}{
		"short":          {good[:62] + "\n", 0o600, "not 64 hexadecimal"},
		"not hex":        {strings.Repeat("zz", 32) + "\n", 0o600, "not 64 hexadecimal"},
		"empty":          {"# nothing\n", 0o600, "holds no key"},
		"group readable": {good + "\n", 0o640, "chmod g-rwx"},
		"world readable": {good + "\n", 0o644, "chmod go-rwx"},
		"old key is bad": {good + "\nnope\n", 0o600, "line 2"},
		"two keys, fine": {good + "\n" + hex.EncodeToString(key(8)) + "\n", 0o600, ""},
		"comments, fine": {"# current\n" + good + "\n\n", 0o400, ""},
	} {
		f := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(f, []byte(tc.body), 0o600)
		os.Chmod(f, tc.mode)
		_, err := store.LoadKeyFile(f)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, store.ErrBadKey) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), good) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestOpenURL: Open reads the URL once, by the backend its scheme names,
// before anything else; it connects lazily, so a good URL opens here
// without a server.
func TestOpenURL(t *testing.T) {
	t.Parallel()
	sealer, _ := store.NewSealer(key(1))
	for raw, want := range map[string]string{
		"redis://127.0.0.1:6379":                        "",
		"redis://app@127.0.0.1:6379/2":                  "",
		"rediss://redis.example:6380":                   "",
		"redis+sentinel://s1:26379,s2:26379/mymaster/1": "",
		"redis+cluster://n1:7000,n2:7000,n3:7000":       "",
		"redis+cluster://app@n1:7000":                   "",
		"redis+cluster://n1:7000/0":                     "has no path",
		"redis+cluster://:hunter2@n1:7000":              "holds a password",
		"redis+cluster://n1":                            "not host:port",
		"redis+cluster://n1:7000?read_only=true":        "no query",
		"redis://:hunter2@127.0.0.1:6379":               "holds a password",
		"redis://app:hunter2@127.0.0.1:6379":            "holds a password",
		"redis+sentinel://s1:26379":                     "/mastername",
		"memcached://127.0.0.1:11211":                   "want redis://",
		"redis://127.0.0.1":                             "not host:port",
		"redis://127.0.0.1:6379/x":                      "not a number",
		"redis://127.0.0.1:6379?password=x":             "no query",
		"redis://127.0.0.1:6379,127.0.0.2:6379":         "one host:port",
		"not a url":                                     "want redis://",
	} {
		r, err := store.Open(raw, store.Options{Sealer: sealer})
		if err == nil {
			r.Close()
		}
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", raw, err)
		case want != "" && (!errors.Is(err, store.ErrBadURL) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "hunter2")):
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
	// The URL is read before the key: a bad URL is the error said.
	if _, err := store.Open("memcached://127.0.0.1:1", store.Options{}); !errors.Is(err, store.ErrBadURL) {
		t.Errorf("a bad URL without a key: %v", err)
	}
	if _, err := store.Open("redis+cluster://127.0.0.1:1", store.Options{}); !errors.Is(err, store.ErrBadKey) {
		t.Errorf("no key: %v", err)
	}
}

func openStore(t *testing.T, url string, o store.Options) *store.Shared {
	t.Helper()
	if o.Sealer == nil {
		o.Sealer, _ = store.NewSealer(key(1))
	}
	r, err := store.Open(url, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestLeaseAndFence: one holder at a time across stores (agents); a
// holder whose lease expired (paused past its time to live) and was taken
// over cannot write; values are sealed in Redis and named by HMAC.
func TestLeaseAndFence(t *testing.T) {
	t.Parallel()
	srv := storetest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer raw.Close()
	testLeaseAndFence(t, srv.URL(), raw, func() []string { return raw.Keys(context.Background(), "*").Val() })
}

// testLeaseAndFence runs TestLeaseAndFence on the store at url, which raw
// reaches too; keys lists every key there.
func testLeaseAndFence(t *testing.T, url string, raw redis.UniversalClient, keys func() []string) {
	ctx := context.Background()
	a := openStore(t, url, store.Options{LeaseTTL: 300 * time.Millisecond})
	b := openStore(t, url, store.Options{LeaseTTL: 300 * time.Millisecond})

	if _, err := a.Get(ctx, "oidc", "crm"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("empty: %v", err)
	}
	l, err := a.Acquire(ctx, "oidc", "crm")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, "oidc", "crm", []byte("refresh-token-1"), 0, l); err != nil {
		t.Fatal(err)
	}
	// b waits while a holds the lease (a renews it past its TTL).
	got := make(chan store.Lease)
	go func() {
		lb, err := b.Acquire(ctx, "oidc", "crm")
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	select {
	case <-got:
		t.Fatal("two holders at once")
	case <-time.After(time.Second): // three TTLs: renewed
	}
	l.Release()
	lb := <-got
	if v, err := b.Get(ctx, "oidc", "crm"); err != nil || string(v) != "refresh-token-1" {
		t.Fatalf("%q %v", v, err)
	}
	// a no longer holds it: its late write is fenced.
	if err := a.Put(ctx, "oidc", "crm", []byte("stale"), 0, l); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("late write: %v", err)
	}
	if err := b.Put(ctx, "oidc", "crm", []byte("refresh-token-2"), 0, lb); err != nil {
		t.Fatal(err)
	}
	lb.Release()

	all := keys()
	if len(all) != 1 {
		t.Errorf("keys in Redis: %q, want the record alone (its lease released)", all)
	}
	for _, k := range all {
		v, _ := raw.HGet(ctx, k, "v").Result()
		if strings.Contains(k, "crm") || strings.Contains(v, "refresh-token") || !strings.HasPrefix(k, "signagent:{oidc:") {
			t.Errorf("in clear in Redis: %q = %q", k, v)
		}
	}
	// A value copied onto another identity's key does not open.
	s, _ := store.NewSealer(key(1))
	src, dst := "signagent:{"+s.Name("oidc", "crm")+"}", "signagent:{"+s.Name("oidc", "boss")+"}"
	v, _ := raw.HGet(ctx, src, "v").Result()
	raw.HSet(ctx, dst, "v", v)
	if _, err := a.Get(ctx, "oidc", "boss"); !errors.Is(err, store.ErrSealed) {
		t.Fatalf("moved value: %v", err)
	}
}

// TestLeaseTakeOver: an agent that dies holding a lease (it stops renewing)
// delays the next one by at most the lease's time to live.
func TestLeaseTakeOver(t *testing.T) { testLeaseTakeOver(t, storetest.Start(t).URL()) }

func testLeaseTakeOver(t *testing.T, url string) {
	ctx := context.Background()
	ttl := 500 * time.Millisecond
	dead := openStore(t, url, store.Options{LeaseTTL: ttl})
	next := openStore(t, url, store.Options{LeaseTTL: ttl})
	if _, err := dead.Acquire(ctx, "legacy", "alice"); err != nil {
		t.Fatal(err)
	}
	dead.Close() // no more renewals, no release: as SIGKILL leaves it
	var takenOver atomic.Int64
	next.Observe(func(op, result string) {
		if op == "acquire" && result == "taken_over" {
			takenOver.Add(1)
		}
	})
	start := time.Now()
	l, err := next.Acquire(ctx, "legacy", "alice")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	t.Logf("taken over after %v (lease TTL %v)", time.Since(start).Round(time.Millisecond), ttl)
	if takenOver.Load() != 1 {
		t.Fatalf("the take-over was not counted")
	}
}

// TestStoreFaults: a store that is down or paused answers every call with
// ErrUnavailable within the store's timeout, never hangs; a wrong password
// is ErrUnavailable naming Redis's refusal, without the password.
func TestStoreFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := storetest.Start(t, "requirepass right-password")
	wrong := openStore(t, srv.URL(), store.Options{Password: "wrong-password", Timeout: 300 * time.Millisecond})
	if err := wrong.Ping(ctx); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "WRONGPASS") || strings.Contains(err.Error(), "password\"") {
		t.Fatalf("wrong password: %v", err)
	}
	right := openStore(t, srv.URL(), store.Options{Password: "right-password", Timeout: 300 * time.Millisecond})
	if err := right.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	var n atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := right.Get(ctx, "oidc", "crm"); errors.Is(err, store.ErrUnavailable) {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	srv.Resume()
	if n.Load() != 4 {
		t.Fatalf("%d of 4 calls to a paused store said unavailable", n.Load())
	}
	if err := right.Ping(ctx); err != nil {
		t.Fatalf("after resume: %v", err)
	}
	srv.Stop()
	if err := right.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("stopped: %v", err)
	}
	// Any TCP port that is not Redis.
	notRedis := storetest.NotRedis(t)
	other := openStore(t, "redis://"+notRedis, store.Options{Timeout: 300 * time.Millisecond})
	if err := other.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("not Redis: %v", err)
	}
}

// TestSentinelFailover: agents on a redis+sentinel:// store follow a
// failover: the master is killed, the sentinels promote the replica, and
// within seconds every call succeeds again on the new master, with what
// was written before the failover; no call fails with READONLY (a write
// sent to the demoted node) once the failover is done.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	set := storetest.StartSentinel(t)
	ctx := context.Background()
	r := openStore(t, set.URL(), store.Options{Timeout: time.Second, LeaseTTL: time.Second})
	write := func(v string) error {
		l, err := r.Acquire(ctx, "oidc", "crm")
		if err != nil {
			return err
		}
		defer l.Release()
		return r.Put(ctx, "oidc", "crm", []byte(v), 0, l)
	}
	if err := write("before the failover"); err != nil {
		t.Fatal(err)
	}
	// The replica has it as soon as the write returns (WAIT 1).
	if n := storetest.Command(set.Replica.Addr, "DBSIZE"); n != "1" {
		t.Fatalf("the replica holds %s keys right after the write, want 1", n)
	}
	// A replica that does not answer: the write waits for it (half the
	// store's timeout), is kept, and is counted as not replicated.
	var unreplicated atomic.Int64
	r.Observe(func(op, result string) {
		if op == "put" && result == "unreplicated" {
			unreplicated.Add(1)
		}
	})
	set.Replica.Pause()
	if err := write("while the replica sleeps"); err != nil {
		t.Fatal(err)
	}
	set.Replica.Resume()
	if unreplicated.Load() != 1 {
		t.Fatalf("%d writes counted as not replicated, want 1 (WAIT was not asked)", unreplicated.Load())
	}
	set.Master.Stop()
	start := time.Now()
	var failures []string
	for {
		err := write("after the failover")
		if err == nil {
			break
		}
		failures = append(failures, err.Error())
		if time.Since(start) > 20*time.Second {
			t.Fatalf("no write succeeded within 20s of the master's death: %q", failures)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("writes failed for %v during the failover (%d tries), then succeeded", time.Since(start).Round(100*time.Millisecond), len(failures))
	for range 20 {
		v, err := r.Get(ctx, "oidc", "crm")
		if err != nil || string(v) != "after the failover" {
			t.Fatalf("after the failover: %q %v", v, err)
		}
		if err := write("after the failover"); err != nil {
			t.Fatalf("a write after the failover: %v", err)
		}
	}
	for _, f := range failures {
		if strings.Contains(f, "READONLY") {
			t.Errorf("a caller saw READONLY: %s", f)
		}
	}
}
