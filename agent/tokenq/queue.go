package tokenq

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/signagent/signagent/errdefs"
)

// ErrQueueFull is returned at once when the token's queue has no room.
var ErrQueueFull = errdefs.New(errdefs.ErrTryAgain, "the token is busy and its queue is full; retry after a moment")

// ErrExpired is returned for a job whose deadline passed while it waited.
var ErrExpired = errors.New("the request's deadline passed while it waited for the token")

// queue runs jobs on a fixed number of workers, with a bounded backlog. A
// full backlog refuses at once instead of making the caller wait: a smart
// card signs one request at a time, and waiting callers would only pile up.
type queue struct {
	jobs     chan *job
	inFlight atomic.Int64
	dropped  atomic.Int64
	done     chan struct{}
}

type job struct {
	ctx context.Context
	run func(context.Context) ([]byte, error)
	out chan result
}

type result struct {
	b   []byte
	err error
}

func newQueue(workers, backlog int) *queue {
	q := &queue{jobs: make(chan *job, backlog), done: make(chan struct{})}
	for range workers {
		go q.work()
	}
	return q
}

func (q *queue) work() {
	for {
		select {
		case <-q.done:
			return
		case j := <-q.jobs:
			if j.ctx.Err() != nil {
				// Dropped before it reaches the token: its caller is gone.
				q.dropped.Add(1)
				j.out <- result{err: ErrExpired}
				continue
			}
			q.inFlight.Add(1)
			b, err := j.run(j.ctx)
			q.inFlight.Add(-1)
			j.out <- result{b, err}
		}
	}
}

// do runs fn on a worker and waits for it or for ctx.
func (q *queue) do(ctx context.Context, fn func(context.Context) ([]byte, error)) ([]byte, error) {
	j := &job{ctx: ctx, run: fn, out: make(chan result, 1)}
	select {
	case q.jobs <- j:
	default:
		return nil, ErrQueueFull
	}
	select {
	case r := <-j.out:
		return r.b, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// depth is the number of jobs waiting or running.
func (q *queue) depth() int { return len(q.jobs) + int(q.inFlight.Load()) }

// close stops the workers once the jobs they run are done; jobs still
// waiting are answered by their callers' deadlines.
func (q *queue) close() { close(q.done) }
