package pkcs11

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	p11 "github.com/miekg/pkcs11"
	"github.com/rs/zerolog"

	"github.com/signagent/signagent/internal/secret"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// probeEnv, set in a process's environment, makes RunProbe load and
// initialize the module it names, then exit.
const probeEnv = "SIGNAGENT_INTERNAL_PROBE_MODULE"

// RunProbe is called first thing in main. When this process was started by
// Probe, it loads and initializes the module, finalizes it and exits: 0 when
// all went well, 1 with one line on stderr otherwise. Otherwise it returns.
func RunProbe() {
	path := os.Getenv(probeEnv)
	if path == "" {
		return
	}
	defaultCrashSignals()
	b, err := loadLibrary(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, notAModule(path))
		os.Exit(1)
	}
	if err := b.Initialize(); err != nil && !tokenerr.IsCode(err, p11.CKR_CRYPTOKI_ALREADY_INITIALIZED) {
		fmt.Fprintln(os.Stderr, tokenerr.Classify("initialize the PKCS#11 module "+path, err))
		os.Exit(1)
	}
	_ = b.Finalize()
	os.Exit(0)
}

// Probe loads and initializes the module at path in a child process (this
// program run again, which must call RunProbe first), within ctx. A module
// is foreign code in our address space: one that crashes in C_Initialize
// would take the process down with a Go stack dump, so an operator's
// command first lets it crash in a child and reports that in one line.
func Probe(ctx context.Context, path string) error {
	if _, err := ResolveModule(path, "flag"); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil // cannot probe; the module is loaded in-process as before
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Args = []string{"signagent"}
	// The child loads the module alone: it gets no secret.
	cmd.Env = append(secret.ChildEnv(os.Environ()), probeEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("could not initialize the PKCS#11 module %s: %w", path, timeoutErr(ctx.Err()))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("%w: %s crashed while being loaded and initialized (%s); it cannot be used", tokenerr.ErrNotAModule, path, ws.Signal())
		}
		msg := strings.TrimSpace(strings.SplitN(stderr.String(), "\n", 2)[0])
		if strings.Contains(msg, tokenerr.ErrNotAModule.Error()) {
			return fmt.Errorf("%w: %s could not be loaded as a shared library with C_GetFunctionList", tokenerr.ErrNotAModule, path)
		}
		if msg == "" {
			msg = ee.Error()
		}
		return fmt.Errorf("%w: %s", tokenerr.ErrModuleFailed, msg)
	}
	return nil // could not start the child; the module is loaded in-process as before
}

// ProbeSelection probes the module a selection names (--module, or the
// module-path of its URI).
func ProbeSelection(ctx context.Context, sel Selection) error {
	sel, err := sel.Complete()
	if err != nil {
		return err
	}
	mod, err := ResolveModule(sel.Module, "flag")
	if err != nil {
		return err
	}
	return Probe(ctx, mod.Path)
}

// OpenProbed is Open for a command-line tool: the PIN is resolved first (a
// prompt is not bounded by the token's deadline), then the module is
// probed in a child process and the key opened, all within ctx's deadline,
// or sel.Timeout when ctx has none.
func OpenProbed(ctx context.Context, sel Selection, log zerolog.Logger) (*Key, error) {
	sel, err := sel.Complete()
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sel.Timeout)
		defer cancel()
	}
	if sel, err = sel.ResolvePIN(ctx); err != nil {
		return nil, err
	}
	if err := ProbeSelection(ctx, sel); err != nil {
		return nil, err
	}
	return Open(ctx, sel, log)
}

// ResolvePIN resolves the selection's PIN (see PINSource.Resolve), unless
// no PIN was given, a reader's keypad may stand in (PadWhenMissing), and
// the chosen token has one: then nothing is asked here, and the user types
// the PIN on the reader when the key logs in. The module is probed before
// it is asked for the token's flags.
func (sel Selection) ResolvePIN(ctx context.Context) (Selection, error) {
	p := sel.PIN
	if p.pad {
		return sel, nil // resolved before: the keypad
	}
	if p.PadWhenMissing && p.File == "" && p.Value == "" && p.pin == "" {
		if pad, err := sel.pinPad(ctx); err != nil {
			return sel, err
		} else if pad {
			sel.PIN.pad, sel.PIN.from = true, "the reader's keypad"
			return sel, nil
		}
	}
	var err error
	sel.PIN, err = sel.PIN.Resolve()
	return sel, err
}

// pinPad says whether the selected token has a protected authentication
// path (a PIN pad).
func (sel Selection) pinPad(ctx context.Context) (bool, error) {
	if err := ProbeSelection(ctx, sel); err != nil {
		return false, err
	}
	mod, err := ResolveModule(sel.Module, "flag")
	if err != nil {
		return false, err
	}
	tokens, err := ListTokens(ctx, mod.Path)
	if err != nil {
		return false, err
	}
	tok, err := tokeninfo.ChooseToken(tokens, sel.Token)
	if err != nil {
		return false, err
	}
	return tok.Raw.Flags&p11.CKF_PROTECTED_AUTHENTICATION_PATH != 0, nil
}
