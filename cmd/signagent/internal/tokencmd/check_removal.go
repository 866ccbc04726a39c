package tokencmd

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// `token check --removal`: the card taken out and put back, and how fast
// the module reports each. Only C_GetSlotInfo asks the reader (OpenSC
// answers C_GetTokenInfo from memory while the card is out), so that is
// the call polled; the card put back is looked for by its label and
// serial among the tokens present, since it may come back in another slot.

const catRemoval = "Removal test"

// removalPoll is how often the module is asked.
const removalPoll = 50 * time.Millisecond

// checkRemoval is what --removal measured. Times run from the moment the
// user pressed Enter when stdin is a terminal, else from the start of
// polling.
type checkRemoval struct {
	Interactive bool          `json:"interactive"`
	PollMS      int           `json:"pollMs"`
	TimeoutMS   int64         `json:"timeoutMs"`
	Removed     checkSeen     `json:"removed"`
	Reinserted  checkSeen     `json:"reinserted"`
	Signature   checkSignedIn `json:"signatureAfterReinsertion"`
	OK          bool          `json:"ok"`
}

// checkSeen is one change the module was watched for.
type checkSeen struct {
	Tried   bool    `json:"tried"`
	Seen    bool    `json:"seen"`
	AfterMS float64 `json:"afterMs,omitempty"`
	Slot    *uint   `json:"slot,omitempty"`
	How     string  `json:"how,omitempty"` // how the module said it
	Why     string  `json:"why,omitempty"` // why it was not seen or not tried
}

// checkSignedIn is the signature tried after the card's return: a new
// session, one login with the PIN already read, a signature verified.
type checkSignedIn struct {
	Tried  bool    `json:"tried"`
	Works  bool    `json:"works"`
	TookMS float64 `json:"tookMs,omitempty"`
	Why    string  `json:"why,omitempty"`
}

// removalCheck runs --removal.
type removalCheck struct {
	e     *cmdutil.Env
	sel   pkcs11.Selection // the PIN read already
	bound time.Duration
	cert  *x509.Certificate // nil: none was found
	signs bool              // a signature worked before the removal
	lines chan string       // stdin's lines, when it is a terminal
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// run closes key (its sessions would not survive the removal), watches
// the card go and come back, and tries a signature with a key opened anew.
func (rc *removalCheck) run(ctx context.Context, key *pkcs11.Key) (*checkRemoval, error) {
	r := &checkRemoval{PollMS: int(removalPoll / time.Millisecond), TimeoutMS: rc.bound.Milliseconds()}
	if f, ok := rc.e.Stdin.(*os.File); ok && secret.IsTerminal(f) {
		r.Interactive = true
		rc.lines = make(chan string)
		go readLines(f, rc.lines) // ends with the process
	}
	octx, cancel := context.WithTimeout(ctx, rc.sel.Timeout)
	w, err := key.Token().WatchPresence(octx)
	cancel()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	tok := key.Token().Info()
	key.Close()

	r.Removed.Tried = true
	start, ok := rc.ask("remove the card from the reader")
	if !ok {
		r.Removed.Why = fmt.Sprintf("nobody pressed Enter within %v", rc.bound)
		rc.fail(r, "the removal was not tried")
		return r, ctx.Err()
	}
	var how string
	took, seen, err := rc.poll(ctx, start, func(ctx context.Context) (bool, error) {
		gone, h, err := w.Gone(ctx)
		how = h
		return gone, err
	})
	if err != nil {
		r.Removed.Why = err.Error()
		rc.fail(r, "the removal was not reported")
		return r, ctx.Err()
	}
	if !seen {
		r.Removed.Why = fmt.Sprintf("not reported within %v: slot %d still says CKF_TOKEN_PRESENT", rc.bound, tok.Slot)
		fmt.Fprintf(rc.e.Stderr, "token check: the module did not report the removal within %v; put the card back\n", rc.bound)
		rc.fail(r, "the removal was not reported")
		return r, nil
	}
	r.Removed.Seen, r.Removed.AfterMS, r.Removed.How, r.Removed.Slot = true, ms(took), how, &tok.Slot

	r.Reinserted.Tried = true
	fmt.Fprintf(rc.e.Stderr, "token check: the module reported the removal after %.1f ms\n", ms(took))
	start, ok = rc.ask("reinsert the card")
	if !ok {
		r.Reinserted.Why = fmt.Sprintf("nobody pressed Enter within %v", rc.bound)
		rc.fail(r, "the card's return was not tried")
		return r, ctx.Err()
	}
	var back tokeninfo.TokenInfo
	var last error
	took, seen, err = rc.poll(ctx, start, func(ctx context.Context) (bool, error) {
		t, ok, err := w.Back(ctx)
		if err != nil && !errors.Is(err, tokenerr.ErrTokenTimeout) {
			last, err = err, nil // pcscd or the reader coming up: ask again
		}
		back = t
		return ok, err
	})
	if err != nil {
		r.Reinserted.Why = err.Error()
		rc.fail(r, "the card was not seen again")
		return r, ctx.Err()
	}
	if !seen {
		r.Reinserted.Why = fmt.Sprintf("token %q (serial %s) not listed again within %v", tok.Label, tok.Serial, rc.bound)
		if last != nil {
			r.Reinserted.Why += " (last: " + last.Error() + ")"
		}
		rc.fail(r, "the card was not seen again")
		return r, nil
	}
	r.Reinserted.Seen, r.Reinserted.AfterMS, r.Reinserted.Slot = true, ms(took), &back.Slot
	r.Reinserted.How = fmt.Sprintf("token %q, serial %s, listed in slot %d", back.Label, back.Serial, back.Slot)
	fmt.Fprintf(rc.e.Stderr, "token check: the module listed the card again after %.1f ms\n", ms(took))

	switch {
	case rc.cert == nil:
		r.Signature.Why = "the key has no certificate to verify a signature with"
	case !rc.signs:
		r.Signature.Why = "no signature worked before the removal"
	default:
		r.Signature.Tried = true
		start := time.Now()
		err := rc.signAgain(ctx)
		r.Signature.Works, r.Signature.TookMS = err == nil, ms(time.Since(start))
		if err != nil {
			r.Signature.Why = err.Error()
		}
	}
	r.OK = !r.Signature.Tried || r.Signature.Works
	return r, nil
}

// fail marks what was not reached after a step that failed.
func (rc *removalCheck) fail(r *checkRemoval, why string) {
	if !r.Reinserted.Tried {
		r.Reinserted.Why = why
	}
	r.Signature.Why = why
	r.OK = false
}

// signAgain opens the key anew (a new session and one login, with the
// PIN read at the start) and has it sign, verified against the
// Certificate found before the removal: the same key came back.
func (rc *removalCheck) signAgain(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, rc.sel.Timeout)
	defer cancel()
	key, err := pkcs11.Open(octx, rc.sel, rc.e.Log)
	if err != nil {
		return err
	}
	defer key.Close()
	return checkSignature(octx, key, rc.cert)
}

// ask tells the user what to do and returns when to measure from: the
// moment Enter was read on a terminal (false if nobody pressed it within
// the bound), else now, when polling starts.
func (rc *removalCheck) ask(what string) (time.Time, bool) {
	if rc.lines == nil {
		fmt.Fprintf(rc.e.Stderr, "token check: %s now (watching for %v)\n", what, rc.bound)
		return time.Now(), true
	}
	fmt.Fprintf(rc.e.Stderr, "token check: %s, and press Enter as you do (within %v): ", what, rc.bound)
	select {
	case _, ok := <-rc.lines:
		if !ok { // stdin ended: watch from now, as without a terminal
			rc.lines = nil
			fmt.Fprintf(rc.e.Stderr, "\ntoken check: %s now (watching for %v)\n", what, rc.bound)
		}
		return time.Now(), true
	case <-time.After(rc.bound):
		fmt.Fprintln(rc.e.Stderr)
		return time.Time{}, false
	}
}

// readLines sends the lines read from r until it ends.
func readLines(r io.Reader, lines chan<- string) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		lines <- s.Text()
	}
	close(lines)
}

// poll asks seen every removalPoll, each call bounded by the token
// timeout, until it says yes or the bound from start passed. It returns
// how long after start it said yes. An error from seen ends it.
func (rc *removalCheck) poll(ctx context.Context, start time.Time, seen func(context.Context) (bool, error)) (time.Duration, bool, error) {
	tick := time.NewTicker(removalPoll)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, rc.sel.Timeout)
		ok, err := seen(cctx)
		cancel()
		took := time.Since(start)
		if ok || err != nil {
			return took, ok, err
		}
		if took >= rc.bound {
			return took, false, nil
		}
		select {
		case <-ctx.Done():
			return took, false, ctx.Err()
		case <-tick.C:
		}
	}
}

// failure is the removal's part of the failure line.
func (r *checkRemoval) failure() string {
	switch {
	case !r.Removed.Seen:
		return r.Removed.Why
	case !r.Reinserted.Seen:
		return r.Reinserted.Why
	}
	return "a signature after the card's return: " + r.Signature.Why
}

// write prints what --removal measured.
func (r *checkRemoval) write(w io.Writer) {
	from := "from the start of polling"
	if r.Interactive {
		from = "from Enter"
	}
	fmt.Fprintf(w, "removal: the reader asked every %d ms (C_GetSlotInfo), times %s\n", r.PollMS, from)
	seen := func(name string, s checkSeen, verb string) {
		if s.Seen {
			fmt.Fprintf(w, "  %s: %s after %.1f ms (%s)\n", name, verb, s.AfterMS, s.How)
		} else {
			fmt.Fprintf(w, "  %s: no: %s\n", name, s.Why)
		}
	}
	seen("removed", r.Removed, "reported")
	seen("reinserted", r.Reinserted, "seen")
	switch s := r.Signature; {
	case s.Works:
		fmt.Fprintf(w, "  signature after reinsertion: yes (a new session, one login, verified against the certificate): %.1f ms\n", s.TookMS)
	case s.Tried:
		fmt.Fprintf(w, "  signature after reinsertion: no: %s\n", s.Why)
	default:
		fmt.Fprintf(w, "  signature after reinsertion: not tried: %s\n", s.Why)
	}
}
