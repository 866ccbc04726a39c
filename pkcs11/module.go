package pkcs11

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	p11 "github.com/miekg/pkcs11"
	"github.com/signagent/signagent/pkcs11/locate"
	"github.com/signagent/signagent/pkcs11/refusedpin"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// Module is a chosen module path and how it was chosen (package locate).
type Module = locate.Module

// ModuleEnv is the environment variable that names the PKCS#11 module.
const ModuleEnv = locate.Env

// ResolveModule returns the module to use (locate.Resolve).
func ResolveModule(explicit, source string) (Module, error) { return locate.Resolve(explicit, source) }

// Registry is a process's set of loaded PKCS#11 modules. A module is loaded
// and initialized once however many keys and listings use it at a time
// (C_Initialize is process-wide state of the library), and finalized when
// the last user releases it. After a lost token the module is finalized and
// initialized again (reset): SoftHSM, like many reader drivers, looks for its
// tokens only in C_Initialize, so a token that comes back is seen only then.
//
// It also remembers each PIN a token refused (package refusedpin), so that
// the same PIN is never tried twice.
type Registry struct {
	load Loader

	mu      sync.Mutex
	mods    map[string]*module
	closing map[string]chan struct{} // path -> closed once its last module is finalized
	refused *refusedpin.Memory
}

// NewRegistry returns a registry that loads modules with load.
func NewRegistry(load Loader) *Registry {
	return &Registry{load: load, mods: map[string]*module{}, closing: map[string]chan struct{}{}, refused: refusedpin.New()}
}

// defaultRegistry mirrors the process-wide state of the loaded libraries,
// which is why it is the one package-level variable here.
var defaultRegistry = NewRegistry(LoadLibrary)

// module is one loaded library.
type module struct {
	reg   *Registry
	path  string
	refs  int           // guarded by reg.mu
	ready chan struct{} // closed when loading ended (err says how)
	err   error

	b Backend
	// Calls hold lk for reading while they are inside the module; reset
	// and shutdown take it for writing, without ever waiting on a call that
	// does not return.
	lk          sync.RWMutex
	initialized bool // guarded by lk
	gen         atomic.Uint64
	stuck       atomic.Int32 // calls abandoned that have not returned yet
}

// acquire returns the module at path, loading and initializing it if this
// process has not yet, within ctx.
func (r *Registry) acquire(ctx context.Context, path string) (*module, error) {
	r.mu.Lock()
	m := r.mods[path]
	if m == nil {
		m = &module{reg: r, path: path, ready: make(chan struct{})}
		r.mods[path] = m
		go m.start(r.closing[path])
	}
	m.refs++
	r.mu.Unlock()
	select {
	case <-m.ready:
	case <-ctx.Done():
		r.release(m)
		return nil, fmt.Errorf("could not load the PKCS#11 module %s: %w (it did not load and initialize in time)", path, tokenerr.ErrTokenTimeout)
	}
	if m.err != nil {
		r.release(m)
		return nil, m.err
	}
	return m, nil
}

// start loads and initializes the module; whoever waits is told through
// ready. It first waits for the module last loaded from the same path to
// be finalized (prev), so that C_Initialize never runs beside C_Finalize
// in one library: OpenSC's heap broke when a card's reconnect initialized
// it while the key it replaced was finalizing it.
func (m *module) start(prev chan struct{}) {
	if prev != nil {
		<-prev
	}
	b, err := m.reg.load(m.path)
	if err != nil {
		err = tokenerr.NotAModule(m.path)
	} else if ierr := b.Initialize(); ierr != nil && !tokenerr.IsCode(ierr, p11.CKR_CRYPTOKI_ALREADY_INITIALIZED) {
		b.Destroy()
		err = tokenerr.Classify("initialize the PKCS#11 module "+m.path, ierr)
	}
	m.reg.mu.Lock()
	m.b, m.err = b, err
	m.initialized = err == nil
	orphan := m.refs == 0 // everyone who wanted it gave up waiting
	if (err != nil || orphan) && m.reg.mods[m.path] == m {
		delete(m.reg.mods, m.path)
	}
	var done chan struct{}
	if orphan && err == nil {
		done = m.reg.closingLocked(m.path)
	}
	close(m.ready)
	m.reg.mu.Unlock()
	if done != nil {
		m.shutdown()
		m.reg.closed(m.path, done)
	}
}

// closingLocked records that the module at path is being finalized; the
// next load of it waits (r.mu held).
func (r *Registry) closingLocked(path string) chan struct{} {
	done := make(chan struct{})
	r.closing[path] = done
	return done
}

// closed says the module at path is finalized.
func (r *Registry) closed(path string, done chan struct{}) {
	r.mu.Lock()
	if r.closing[path] == done {
		delete(r.closing, path)
	}
	r.mu.Unlock()
	close(done)
}

// release drops one use; the last one finalizes the module.
func (r *Registry) release(m *module) {
	r.mu.Lock()
	m.refs--
	last := m.refs == 0
	var done chan struct{}
	if last {
		select {
		case <-m.ready:
			if m.err == nil {
				done = r.closingLocked(m.path)
			}
		default: // start() shuts it down when it finishes
		}
		if r.mods[m.path] == m {
			delete(r.mods, m.path)
		}
	}
	r.mu.Unlock()
	if done != nil {
		m.shutdown()
		r.closed(m.path, done)
	}
}

// shutdown finalizes and unloads the module, unless a call is still inside
// it: a module that does not return from one call may not return from
// C_Finalize either, so it is left to the process's exit.
func (m *module) shutdown() {
	if !m.tryLock(time.Second) {
		return
	}
	defer m.lk.Unlock()
	if m.initialized {
		_ = m.b.Finalize()
		m.initialized = false
	}
	m.b.Destroy()
}

// tryLock takes lk for writing within d, giving up at once while a call is
// stuck in the module.
func (m *module) tryLock(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !m.lk.TryLock() {
		if m.stuck.Load() > 0 || time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// reset finalizes the module and initializes it again, unless it was
// already reset since generation gen. It is what makes a token that was
// removed and put back visible again.
func (m *module) reset(gen uint64) error {
	if !m.tryLock(2 * time.Second) {
		return fmt.Errorf("could not initialize the PKCS#11 module again: %w (a call into it has not returned)", tokenerr.ErrTokenTimeout)
	}
	defer m.lk.Unlock()
	if m.gen.Load() != gen {
		return nil
	}
	if m.initialized {
		_ = m.b.Finalize()
		m.initialized = false
	}
	m.gen.Add(1)
	if err := m.b.Initialize(); err != nil && !tokenerr.IsCode(err, p11.CKR_CRYPTOKI_ALREADY_INITIALIZED) {
		return tokenerr.Classify("initialize the PKCS#11 module again", err)
	}
	m.initialized = true
	return nil
}

// ensureInitialized initializes the module again if an earlier reset
// failed (SoftHSM fails C_Initialize while its token directory is away).
func (m *module) ensureInitialized() error {
	m.lk.RLock()
	ok := m.initialized
	m.lk.RUnlock()
	if ok {
		return nil
	}
	return m.reset(m.gen.Load())
}

// call runs fn in the module within ctx. A call still running at the
// deadline is abandoned: the caller gets tokenerr.ErrTokenTimeout at once, and late
// runs when (if ever) the module returns, to dispose of what the call held.
// PKCS#11 offers no way to interrupt a call.
func call[T any](ctx context.Context, m *module, fn func(Backend) (T, error), late func()) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, tokenerr.Timeout(err)
	}
	if ctx.Done() == nil { // never cancelled: no need to watch it
		m.lk.RLock()
		defer m.lk.RUnlock()
		if !m.initialized {
			return zero, p11.Error(p11.CKR_CRYPTOKI_NOT_INITIALIZED)
		}
		return fn(m.b)
	}
	type result struct {
		v   T
		err error
	}
	const running, finished, abandoned = 0, 1, 2
	var state atomic.Int32
	done := make(chan result, 1)
	go func() {
		m.lk.RLock()
		var res result
		if !m.initialized {
			res.err = p11.Error(p11.CKR_CRYPTOKI_NOT_INITIALIZED)
		} else {
			res.v, res.err = fn(m.b)
		}
		m.lk.RUnlock()
		if !state.CompareAndSwap(running, finished) {
			m.stuck.Add(-1)
			if late != nil {
				late()
			}
			return
		}
		done <- res
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-ctx.Done():
		if state.CompareAndSwap(running, abandoned) {
			m.stuck.Add(1)
			return zero, tokenerr.Timeout(ctx.Err())
		}
		res := <-done
		return res.v, res.err
	}
}

// tokenKey names a token for the refused-PIN memory.
func tokenKey(path string, t tokeninfo.TokenInfo) string {
	return path + "\x00" + t.Serial + "\x00" + t.Label
}
