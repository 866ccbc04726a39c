package store

import "context"

// ReadUpTo makes s read (and write, when every live agent does) formats up
// to newest: in one test process, an agent of the next release (format
// 3) next to one of this release, as the two builds of the cmd tests are.
// Called before Announce.
func ReadUpTo(s *Shared, newest int) { s.fmts.newest = newest }

// Die stops s's announcements without removing them, as a process killed
// (SIGKILL, a node lost) leaves them: they expire.
func Die(s *Shared) {
	s.fmts.mu.Lock()
	stop, done := s.fmts.stop, s.fmts.done
	s.fmts.stop = nil
	s.fmts.mu.Unlock()
	close(stop)
	<-done
}

// BeforeWrite has f run once in s's next Put, between its read and its
// write: a real store cannot be made to interleave two agents' steps
// there otherwise.
func BeforeWrite(s *Shared, f func()) { s.beforeWrite = f }

// Convert rewrites kind and id's record as an agent asked for it in an
// older format does (convert.go), at once.
func Convert(s *Shared, kind, id string) {
	data, _ := s.keys(kind, id)
	s.convert(context.Background(), data)
}
