package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"

	"golang.org/x/sync/semaphore"
)

// A proxied call's body is read whole before anything is sent, so that the
// retry after a 401 can send it again. Bodies held at once, in memory or
// spooled to disk, share one budget: a caller that would exceed it is
// answered 503 at once, and no number of large or slow posts can take the
// agent's memory (and with it every caller's signatures) away. Bodies above
// spoolAbove go to an unlinked 0600 temporary file, as nginx does past
// client_body_buffer_size.

// DefaultBodyBudget is the default total of proxied bodies held at once
// (Config.BodyBudget).
const DefaultBodyBudget = 256 << 20

// spoolAbove is the largest body kept in memory.
const spoolAbove = 256 << 10

// ErrBusy answers a proxied call whose body does not fit the budget (the
// agent answers it 503 busy).
var ErrBusy = errors.New("the agent holds as many request bodies as its budget allows (--service-body-budget); retry after a moment")

// bodyBudget is the shared budget of held bodies.
type bodyBudget struct {
	sem *semaphore.Weighted
	dir string // where bodies are spooled ("": os.TempDir())
}

func newBodyBudget(total int64) *bodyBudget {
	return &bodyBudget{sem: semaphore.NewWeighted(total)}
}

// heldBody is a proxied call's body, sent again on a retry; Close gives
// its bytes back to the budget.
type heldBody struct {
	budget *bodyBudget
	held   int64 // bytes taken from the budget
	mem    []byte
	file   *os.File // unlinked: gone from the file system already
	size   int64
}

// noBody is the held body of every request that came without one; it is
// never changed.
var noBody heldBody

// reader returns the body from its start.
func (h *heldBody) reader() io.Reader {
	if h.file != nil {
		return io.NewSectionReader(h.file, 0, h.size)
	}
	return bytes.NewReader(h.mem)
}

func (h *heldBody) Close() {
	if h.held == 0 && h.file == nil {
		return // nothing taken (noBody among them)
	}
	if h.file != nil {
		h.file.Close()
	}
	h.budget.sem.Release(h.held)
	h.held = 0
}

// hold reads r (bounded by the caller's MaxBytesReader) into the budget:
// the Content-Length, when given, is taken at once (or refused at once);
// a body of unknown length takes the budget as it is read.
func (b *bodyBudget) hold(r io.Reader, contentLength int64) (*heldBody, error) {
	if r == http.NoBody {
		return &noBody, nil // most proxied calls: a GET the server read no body for
	}
	h := &heldBody{budget: b}
	if contentLength > 0 {
		if !b.sem.TryAcquire(contentLength) {
			return nil, ErrBusy
		}
		h.held = contentLength
	}
	if contentLength == 0 {
		// Most proxied calls are GETs with no body: a first small read
		// says so without taking a copy buffer.
		var first [512]byte
		n, err := io.ReadFull(r, first[:])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			if n > 0 && !b.sem.TryAcquire(int64(n)) {
				return nil, ErrBusy
			}
			h.held, h.size, h.mem = int64(n), int64(n), bytes.Clone(first[:n])
			return h, nil
		}
		if err != nil {
			return nil, err
		}
		r = io.MultiReader(bytes.NewReader(first[:n]), r)
	}
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	var w io.Writer
	var mem bytes.Buffer
	if contentLength > 0 && contentLength <= spoolAbove {
		mem.Grow(int(contentLength))
	}
	w = &mem
	for {
		n, err := r.Read(buf)
		if n > 0 {
			h.size += int64(n)
			if h.size > h.held {
				grow := max(h.size-h.held, int64(len(buf)))
				if !b.sem.TryAcquire(grow) {
					h.Close()
					return nil, ErrBusy
				}
				h.held += grow
			}
			if h.file == nil && h.size > spoolAbove {
				if h.file, err = b.spool(); err != nil {
					h.Close()
					return nil, err
				}
				if _, err := h.file.Write(mem.Bytes()); err != nil {
					h.Close()
					return nil, fmt.Errorf("could not spool the request body: %w", err)
				}
				mem = bytes.Buffer{}
				w = h.file
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				h.Close()
				return nil, fmt.Errorf("could not spool the request body: %w", werr)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			h.Close()
			return nil, err
		}
	}
	h.mem = mem.Bytes()
	return h, nil
}

// copyBuffers are the buffers bodies are read through, shared by calls.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// spool creates an unlinked 0600 file for a body.
func (b *bodyBudget) spool() (*os.File, error) {
	f, err := os.CreateTemp(b.dir, "signagent-body-*")
	if err != nil {
		return nil, fmt.Errorf("could not spool the request body: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("could not spool the request body: %w", err)
	}
	return f, nil
}
