package agent

import (
	"sync"
	"time"
)

// sampler lets through at most burst events per period and counts the rest,
// so that a caller refused in a loop cannot fill the logs.
type sampler struct {
	burst  int
	period time.Duration

	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int
}

func newSampler(burst int, period time.Duration) *sampler {
	return &sampler{burst: burst, period: period}
}

// allow reports whether to record this event, and how many were suppressed
// since the last one recorded.
func (s *sampler) allow(now time.Time) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.start) >= s.period {
		s.start, s.n = now, 0
	}
	if s.n >= s.burst {
		s.suppressed++
		return false, 0
	}
	s.n++
	sup := s.suppressed
	s.suppressed = 0
	return true, sup
}
