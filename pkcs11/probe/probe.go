// Package probe tries a PKCS#11 module in a child process before this
// one loads it (a module that crashes in C_Initialize would take the
// process down), and opens a key for a command-line tool that way: the PIN
// first, then the probe, then pkcs11.Open.
package probe

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
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// probeEnv, set in a process's environment, makes Run load and
// initialize the module it names, then exit.
const probeEnv = "SIGNAGENT_INTERNAL_PROBE_MODULE"

// Run is called first thing in main. When this process was started by
// Module, it loads and initializes the module, finalizes it and exits: 0 when
// all went well, 1 with one line on stderr otherwise. Otherwise it returns.
func Run() {
	path := os.Getenv(probeEnv)
	if path == "" {
		return
	}
	defaultCrashSignals()
	b, err := pkcs11.LoadLibrary(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, tokenerr.NotAModule(path))
		os.Exit(1)
	}
	if err := b.Initialize(); err != nil && !tokenerr.IsCode(err, p11.CKR_CRYPTOKI_ALREADY_INITIALIZED) {
		fmt.Fprintln(os.Stderr, tokenerr.Classify("initialize the PKCS#11 module "+path, err))
		os.Exit(1)
	}
	_ = b.Finalize()
	os.Exit(0)
}

// Module loads and initializes the module at path in a child process (this
// program run again, which must call Run first), within ctx. A module
// is foreign code in our address space: one that crashes in C_Initialize
// would take the process down with a Go stack dump, so an operator's
// command first lets it crash in a child and reports that in one line.
func Module(ctx context.Context, path string) error {
	if _, err := pkcs11.ResolveModule(path, "flag"); err != nil {
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
		return fmt.Errorf("could not initialize the PKCS#11 module %s: %w", path, tokenerr.Timeout(ctx.Err()))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("%w: %s crashed while being loaded and initialized (%s); it cannot be used", tokenerr.ErrNotAModule, path, ws.Signal())
		}
		msg := strings.TrimSpace(strings.SplitN(stderr.String(), "\n", 2)[0])
		if strings.Contains(msg, tokenerr.ErrNotAModule.Error()) {
			return tokenerr.NotAModule(path)
		}
		if msg == "" {
			msg = ee.Error()
		}
		return fmt.Errorf("%w: %s", tokenerr.ErrModuleFailed, msg)
	}
	return nil // could not start the child; the module is loaded in-process as before
}

// Selection probes the module a selection names (--module, or the
// module-path of its URI).
func Selection(ctx context.Context, sel pkcs11.Selection) error {
	sel, err := sel.Complete()
	if err != nil {
		return err
	}
	mod, err := pkcs11.ResolveModule(sel.Module, "flag")
	if err != nil {
		return err
	}
	return Module(ctx, mod.Path)
}

// Open is pkcs11.Open for a command-line tool: the PIN is resolved first (a
// prompt is not bounded by the token's deadline), then the module is
// probed in a child process and the key opened, all within ctx's deadline,
// or sel.Timeout when ctx has none.
func Open(ctx context.Context, sel pkcs11.Selection, log zerolog.Logger) (*pkcs11.Key, error) {
	sel, err := sel.Complete()
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sel.Timeout)
		defer cancel()
	}
	if sel, err = ResolvePIN(ctx, sel); err != nil {
		return nil, err
	}
	if err := Selection(ctx, sel); err != nil {
		return nil, err
	}
	return pkcs11.Open(ctx, sel, log)
}

// ResolvePIN resolves the selection's PIN (see pkcs11.PINSource.Resolve), unless
// no PIN was given, a reader's keypad may stand in (PadWhenMissing), and
// the chosen token has one: then nothing is asked here, and the user types
// the PIN on the reader when the key logs in. The module is probed before
// it is asked for the token's flags.
func ResolvePIN(ctx context.Context, sel pkcs11.Selection) (pkcs11.Selection, error) {
	p := sel.PIN
	if p.Pad() {
		return sel, nil // resolved before: the keypad
	}
	if p.PadWhenMissing && p.Missing() {
		if pad, err := pinPad(ctx, sel); err != nil {
			return sel, err
		} else if pad {
			sel.PIN = p.OnPad()
			return sel, nil
		}
	}
	var err error
	sel.PIN, err = sel.PIN.Resolve()
	return sel, err
}

// pinPad says whether the selected token has a protected authentication
// path (a PIN pad).
func pinPad(ctx context.Context, sel pkcs11.Selection) (bool, error) {
	if err := Selection(ctx, sel); err != nil {
		return false, err
	}
	mod, err := pkcs11.ResolveModule(sel.Module, "flag")
	if err != nil {
		return false, err
	}
	tokens, err := pkcs11.ListTokens(ctx, mod.Path)
	if err != nil {
		return false, err
	}
	tok, err := tokeninfo.ChooseToken(tokens, sel.Token)
	if err != nil {
		return false, err
	}
	return tok.Raw.Flags&p11.CKF_PROTECTED_AUTHENTICATION_PATH != 0, nil
}
