package store

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
