package store

import (
	"context"
	"strings"
	"time"
)

// A rollback brings back agents that read only older formats while
// records of a newer one are in the store. An agent that meets one such
// record, while an agent that reads its format is live, asks for it in
// older form (a set of key names, no identity in clear) and waits, at
// most the store's timeout, for it to be rewritten; the agents that read
// the newer format take the requests every convertEvery and rewrite each
// record in the format every live agent reads, swapped in only while it
// is still the record read (no lease: convert), with a higher generation (so that no agent takes it for a rollback). With no
// such agent live, the record is left alone and the call answers
// store_format_newer: start one agent of the newer release, and it turns
// them back as they are asked for.
const (
	convertEvery = 200 * time.Millisecond
	// requestsTTL bounds how long an unanswered request stays.
	requestsTTL = 10 * time.Minute
	// pollOlder is how often a waiting reader looks again.
	pollOlder = 25 * time.Millisecond
)

// awaitOlder waits for the record at data, of format fe.Format, to be
// rewritten in a format this process reads, and returns it sealed; fe
// itself when no live agent reads that format or none rewrites it in
// time, ErrNotFound when it was removed meanwhile.
func (s *Shared) awaitOlder(ctx context.Context, data string, fe *FormatError) ([]byte, error) {
	if !s.someoneReads(fe.Format) { // open listed them when due
		return nil, fe
	}
	err := s.bounded(ctx, func(ctx context.Context) error {
		return s.b.request(ctx, s.requestsKey(), data, requestsTTL)
	})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(s.timeout)
	for time.Now().Before(deadline) {
		t := time.NewTimer(pollOlder)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fe
		case <-t.C:
		}
		sealed, err := s.read(ctx, data)
		switch {
		case err != nil: // ErrNotFound too: removed meanwhile
			return nil, err
		case len(sealed) > 0 && int(sealed[0]) <= s.fmts.newest:
			return sealed, nil
		}
	}
	return nil, fe
}

func (s *Shared) isAnnouncing() bool {
	s.fmts.mu.Lock()
	defer s.fmts.mu.Unlock()
	return s.fmts.stop != nil
}

// convertRequested takes the pending requests for records in an older
// format and rewrites each (the live agents listed again first: the one
// asking may have just joined).
func (s *Shared) convertRequested(ctx context.Context) {
	var keys []string
	err := s.bounded(ctx, func(ctx context.Context) (err error) {
		keys, err = s.b.requests(ctx, s.requestsKey(), 64)
		return err
	})
	if err != nil || len(keys) == 0 {
		return
	}
	if s.list(ctx, s.isAnnouncing()) != nil {
		return
	}
	for _, k := range keys {
		s.convert(ctx, k)
	}
}

// convert rewrites the record at data in the write format, when it is of
// a newer one this process reads and can open from its key name alone
// (format 3): the same record, with a higher generation (no agent takes
// it for a rollback), swapped in only while the record is still the one
// read. It takes no lease: the agent asking may hold the identity's while
// it waits. A holder's write that read the record before the rewrite is
// refused (Put compares the value it read) and reads it again, so that it
// never lands over the rewritten one with a lower generation. What it
// cannot do it leaves: the reader asks again.
func (s *Shared) convert(ctx context.Context, data string) {
	name, ok := strings.CutPrefix(data, s.prefix+"{")
	name, ok2 := strings.CutSuffix(name, "}")
	kind, _, ok3 := strings.Cut(name, ":")
	if !ok || !ok2 || !ok3 || s.fmts.newest < format3 {
		return
	}
	sealed, err := s.read(ctx, data)
	w := s.writeFormat(ctx)
	if err != nil || len(sealed) == 0 || sealed[0] != format3 || format3 <= w {
		return
	}
	id, plain, gen, expiry, err := s.sealer.open3(kind, name, sealed)
	if err != nil {
		return
	}
	var ttl time.Duration
	if expiry > 0 {
		if ttl = time.Until(time.UnixMilli(expiry)); ttl <= 0 {
			return // expired: no one uses it
		}
	}
	next := s.gens.next(data, gen, time.Now())
	value := s.seal(w, kind, id, next, plain, ttl)
	err = s.write(ctx, func(ctx context.Context) error { return s.b.swap(ctx, data, sealed, value, ttl) })
	s.note("convert", err)
	if err == nil {
		s.gens.raise(data, next)
	}
}

// sweep rewrites every record of a format newer than the write format
// (an agent that reads only older ones is live: a rollback), key by key,
// each swapped in only while it is still the record read (convert: no
// lease is taken), until ctx ends. An agent that reads a newer format
// sweeps when its write format goes down and again when it stops, so that
// no record it wrote in the newer format before it knew is left for the
// older agents after it.
func (s *Shared) sweep(ctx context.Context) {
	if s.fmts.newest <= baseFormat || s.writeFormat(ctx) >= s.fmts.newest {
		return
	}
	keys, err := s.records(ctx, 0)
	if err != nil {
		return
	}
	for _, k := range keys {
		if ctx.Err() != nil {
			return
		}
		s.convert(ctx, k)
	}
}

// records lists the records' key names (no lease, no announcement), up
// to n of them (0: all), on every node, within ten times the store's
// timeout.
func (s *Shared) records(ctx context.Context, n int) ([]string, error) {
	var keys []string
	ctx, cancel := context.WithTimeout(ctx, 10*s.timeout)
	defer cancel()
	err := s.b.scan(ctx, s.prefix+"{*}", func(k string) bool {
		if strings.HasSuffix(k, "}") && !strings.HasPrefix(k, s.prefix+"{formats}") {
			keys = append(keys, k)
		}
		return n == 0 || len(keys) < n
	})
	return keys, err
}
