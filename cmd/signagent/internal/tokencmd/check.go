package tokencmd

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/signagent/internal/factory"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/gostkeyx"
	"github.com/signagent/signagent/pkcs11/inspect"
	"github.com/signagent/signagent/pkcs11/probe"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
	"github.com/signagent/signagent/signer"
)

// checkCommand is `signagent token check`: a self-test a user runs on
// their own card, and what they attach to a bug report.
func checkCommand(f *factory.Factory) *cli.Command {
	return &cli.Command{
		Name:            "check",
		HideHelpCommand: true,
		Usage:           "test the PKCS#11 token and key on what signagent needs: mechanisms, a signature, a certificate login, PIN tries",
		Description: "Reports the module's library information, its slots and tokens, the mechanisms it offers against\n" +
			"what each signagent function needs, which of them the key allows (CKA_SIGN, CKA_DECRYPT), a real\n" +
			"signature verified against the key's certificate, a certificate-login round trip where the key can\n" +
			"decrypt, the median time of each, and what the token says of the PIN's tries. Nothing secret is\n" +
			"printed (of the certificate: its thumbprint and common name). Exit 0 when every function the key\n" +
			"allows works, 1 otherwise, 2 for bad flags. Attach --json to a bug report.\n\n" +
			"With --removal it then asks for the card to be removed and put back (on stderr; press Enter as you\n" +
			"do it when stdin is a terminal), asks the reader every 50 ms (C_GetSlotInfo) and reports how fast the\n" +
			"module saw each, and whether a signature works again after a new login with the same PIN.\n\n" +
			cmdutil.Examples("signagent token check --module /usr/lib/librtpkcs11ecp.so --key-label mykey",
				"signagent token check --key 'pkcs11:token=partner;object=signing' --pin-file pin --json",
				"signagent token check --removal"),
		Flags: cmdutil.Concat(cmdutil.TokenFlags(), []cli.Flag{
			&cli.IntFlag{Name: "rounds", Value: 5, Category: cmdutil.CatOutput, Usage: "time each operation `N` times and report the median (1 to 100)"},
			&cli.BoolFlag{Name: "removal", Category: catRemoval, Usage: "then ask for the card to be removed and put back, and time how fast the module reports each"},
			&cli.DurationFlag{Name: "removal-timeout", Value: time.Minute, Category: catRemoval, Usage: "with --removal, watch at most `DURATION` for the removal, and as long for the card's return (1s to 1h)"},
			cmdutil.JSONFlag(`{"module","token","key","certificate","mechanisms","functions","pin","removal","ok"}`),
		}),
		Action: cmdutil.Run(f, readCheck, runCheck),
	}
}

// CheckReport is what `token check` prints (--json as it is).
type CheckReport struct {
	Module      *inspect.ModuleReport `json:"module"`
	Token       tokeninfo.TokenInfo   `json:"token"`
	Key         inspect.KeyFacts      `json:"key"`
	Certificate *checkCert            `json:"certificate"`
	CertError   string                `json:"certificateError,omitempty"`
	Mechanisms  []inspect.Mechanism   `json:"mechanisms"`
	Functions   []checkFunction       `json:"functions"`
	PIN         *inspect.PINState     `json:"pin"`
	Removal     *checkRemoval         `json:"removal,omitempty"`
	OK          bool                  `json:"ok"`
}

// checkCert is all the check shows of the certificate.
type checkCert struct {
	Thumbprint string `json:"thumbprint"`
	CommonName string `json:"commonName"`
	NotAfter   string `json:"notAfter"`
	// Source is where it came from: "token", or the --certificate-file's path.
	Source string `json:"source"`
}

// checkFunction is a capability and what trying it showed.
type checkFunction struct {
	Capability
	Tried  bool        `json:"tried"`
	Works  bool        `json:"works"`
	Error  string      `json:"error,omitempty"`
	Timing *checkTimes `json:"timing,omitempty"`
	// Ways: for a GOST key's certificate login, each way tried.
	Ways []checkWay `json:"ways,omitempty"`
}

type checkTimes struct {
	Rounds   int     `json:"rounds"`
	MedianMS float64 `json:"medianMs"`
	MinMS    float64 `json:"minMs"`
	MaxMS    float64 `json:"maxMs"`
}

// checkOptions are what check is told: how many rounds each operation
// is timed, whether (and how long) the card's removal is watched, and
// the form of the report. The token and key are the factory's selection.
type checkOptions struct {
	Rounds         int
	Removal        bool
	RemovalTimeout time.Duration
	JSON           bool
}

// readCheck reads check's flags.
func readCheck(c *cli.Context) (checkOptions, error) {
	o := checkOptions{Rounds: c.Int("rounds"), Removal: c.Bool("removal"), RemovalTimeout: c.Duration("removal-timeout"), JSON: c.Bool("json")}
	if o.Rounds < 1 || o.Rounds > 100 {
		return o, cmdutil.UsageErr(fmt.Errorf("--rounds %d: want 1 to 100", o.Rounds))
	}
	if d := o.RemovalTimeout; d < time.Second || d > time.Hour {
		return o, cmdutil.UsageErr(fmt.Errorf("--removal-timeout %v: want 1s to 1h", d))
	}
	return o, nil
}

// runCheck tests the token and key and reports; not OK is exit 1.
func runCheck(parent context.Context, f *factory.Factory, o checkOptions) error {
	e := f.Env
	rounds := o.Rounds
	sel, err := f.Selection() // the PIN from its usual sources, asked first
	if err != nil {
		return err
	}
	sel.NoCertificate = true // a key without one is reported, not refused
	ctx, cancel := context.WithTimeout(parent, sel.Timeout)
	defer cancel()
	if err := probe.Selection(ctx, sel); err != nil {
		return err
	}
	mod, err := pkcs11.ResolveModule(sel.Module, "flag")
	if err != nil {
		return err
	}
	r := CheckReport{}
	if r.Module, err = inspect.InspectModule(ctx, mod.Path); err != nil {
		return err
	}
	key, err := pkcs11.Open(ctx, sel, e.Log)
	if err != nil {
		return err
	}
	defer key.Close()
	r.Token, r.Key = key.Token().Info(), inspect.Facts(key)
	if r.Mechanisms, err = inspect.Mechanisms(ctx, key.Token()); err != nil {
		return err
	}
	cert, certErr := key.FindCertificate(ctx)
	if certErr != nil {
		r.CertError = certErr.Error()
	} else {
		r.Certificate = &checkCert{Thumbprint: canonical.ThumbprintOf(cert), CommonName: cert.Subject.CommonName, NotAfter: cmdutil.JSONTime(cert.NotAfter), Source: "token"}
		if sel.CertFile != "" {
			r.Certificate.Source = sel.CertFile
		}
	}
	op := func(fn func(context.Context) error) (*checkTimes, error) {
		return timeRounds(parent, rounds, sel.Timeout, fn)
	}
	for _, cp := range Capabilities(key, r.Mechanisms) {
		fn := checkFunction{Capability: cp}
		if cp.Allowed {
			fn.Tried = true
			switch {
			case certErr != nil:
				err = certErr
			case cp.Function == FunctionTrusted:
				fn.Timing, err = op(func(ctx context.Context) error { return checkSignature(ctx, key, cert) })
			case key.IsGOST():
				wctx, cancel := context.WithTimeout(parent, sel.Timeout*time.Duration(len(gostkeyx.Ways)))
				fn.Ways, err = tryGOSTWays(wctx, key, cert)
				cancel()
				if err == nil {
					fn.Timing, err = op(func(ctx context.Context) error { return checkGOSTCertLogin(ctx, key, cert) })
				}
			default:
				fn.Timing, err = op(func(ctx context.Context) error { return checkCertLogin(ctx, key, cert) })
			}
			fn.Works = err == nil
			if err != nil {
				fn.Error = err.Error()
			}
		}
		r.Functions = append(r.Functions, fn)
	}
	if pin, err := inspect.ReadPINState(ctx, key.Token()); err == nil {
		r.PIN = &pin
	}
	r.OK = r.Functions[0].Works && (!r.Functions[1].Allowed || r.Functions[1].Works)
	if !o.JSON {
		// The report first, then the removal's questions and answers.
		if err := writeCheck(e.Stdout, mod, r); err != nil {
			return err
		}
	}
	if o.Removal {
		rm := removalCheck{e: e, sel: sel, bound: o.RemovalTimeout, cert: cert, signs: r.Functions[0].Works}
		if r.Removal, err = rm.run(parent, key); err != nil {
			return err
		}
		r.OK = r.OK && r.Removal.OK
	}
	if o.JSON {
		err = cmdutil.WriteJSON(e, r)
	} else {
		err = writeResult(e.Stdout, r)
	}
	if err != nil || r.OK {
		return err
	}
	var failed []string
	for _, fn := range r.Functions {
		if fn.Function == FunctionTrusted || fn.Allowed {
			if !fn.Works {
				failed = append(failed, fn.Function+": "+whyNot(fn))
			}
		}
	}
	if rm := r.Removal; rm != nil && !rm.OK {
		failed = append(failed, "removal: "+rm.failure())
	}
	return cmdutil.Exit(cmdutil.ExitFailure, fmt.Errorf("token check: %s", strings.Join(failed, "; ")))
}

// timeRounds runs fn rounds times, each bounded by timeout, and returns
// the times; the first error ends it.
func timeRounds(ctx context.Context, rounds int, timeout time.Duration, fn func(context.Context) error) (*checkTimes, error) {
	took := make([]time.Duration, 0, rounds)
	for range rounds {
		octx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		err := fn(octx)
		cancel()
		if err != nil {
			return nil, err
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	median := took[len(took)/2]
	if len(took)%2 == 0 {
		median = (took[len(took)/2-1] + took[len(took)/2]) / 2
	}
	return &checkTimes{Rounds: rounds, MedianMS: ms(median), MinMS: ms(took[0]), MaxMS: ms(took[len(took)-1])}, nil
}

// checkSignature signs a text through the signer, as trusted
// authentication does, and verifies it in software against cert.
func checkSignature(ctx context.Context, key *pkcs11.Key, cert *x509.Certificate) error {
	text := []byte("signagent token check " + time.Now().UTC().Format(time.RFC3339Nano))
	cms := signer.CMS{Key: key, Cert: cert, Options: signer.Options{Hash: crypto.SHA256}}
	der, err := cms.SignText(ctx, text, time.Now())
	if err != nil {
		return err
	}
	v, err := signer.Verify(der, text, nil)
	if err != nil {
		return fmt.Errorf("the token's signature does not verify against the certificate: %w", err)
	}
	if !v.Signer.Equal(cert) {
		return errors.New("the signature verifies with another certificate than the key's")
	}
	return nil
}

// checkCertLogin encrypts 32 random bytes in software to the
// Certificate's RSA key (PKCS#1 v1.5, as a certificate login's challenge
// is) and has the token decrypt them.
func checkCertLogin(ctx context.Context, key *pkcs11.Key, cert *x509.Certificate) error {
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return errors.New("the certificate's key is not RSA")
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	ct, err := rsa.EncryptPKCS1v15(rand.Reader, pub, secret)
	if err != nil {
		return err
	}
	got, err := key.DecryptContext(ctx, ct, nil)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, secret) {
		return errors.New("the token decrypted the challenge to other bytes")
	}
	return nil
}

func whyNot(fn checkFunction) string {
	switch {
	case !fn.Allowed || !fn.Tried:
		return fn.Why
	case fn.Error != "" && fn.Why != "":
		return fn.Why + " (" + fn.Error + ")"
	case fn.Error != "":
		return fn.Error
	}
	return fn.Why
}

// writeCheck prints the report grouped by what the token can do.
func writeCheck(w io.Writer, mod pkcs11.Module, r CheckReport) error {
	lib := r.Module.Library
	fmt.Fprintf(w, "module: %s (%s)\n", mod.Path, mod.Source)
	fmt.Fprintf(w, "  library: %q by %q, version %s, Cryptoki %s\n", lib.Description, lib.Manufacturer, lib.LibraryVersion, lib.CryptokiVersion)
	for _, s := range r.Module.Slots {
		fmt.Fprintf(w, "  slot %d: %q", s.ID, s.Description)
		switch {
		case s.Token != nil && !s.Token.Initialized:
			fmt.Fprint(w, ", a token not initialized")
		case s.Token != nil:
			fmt.Fprintf(w, ", token %q (serial %s, %s %s)", s.Token.Label, s.Token.Serial, s.Token.Manufacturer, s.Token.Model)
		case s.TokenPresent:
			fmt.Fprint(w, ", a token the module cannot read")
		default:
			fmt.Fprint(w, ", no token")
		}
		if s.Removable {
			fmt.Fprint(w, ", removable")
		}
		fmt.Fprintln(w)
	}
	k := r.Key
	shape := fmt.Sprintf("%s %d", k.Type, k.Bits)
	if k.Curve != "" {
		shape += " " + k.Curve
	}
	fmt.Fprintf(w, "token: %q (serial %s, slot %d)\n", r.Token.Label, r.Token.Serial, r.Token.Slot)
	fmt.Fprintf(w, "key: %q (id %s): %s; may sign: %s, may decrypt: %s\n", k.Label, k.ID, shape, yesNo(k.Sign), yesNo(k.Decrypt))
	if c := r.Certificate; c != nil {
		fmt.Fprintf(w, "certificate: %q, thumbprint %s, valid until %s, %s\n", c.CommonName, c.Thumbprint, c.NotAfter[:10], certSource(c))
	} else {
		fmt.Fprintf(w, "certificate: none: %s\n", r.CertError)
	}
	fmt.Fprintf(w, "mechanisms: %d offered (--json lists each with its flags)\n", len(r.Mechanisms))
	for _, fn := range r.Functions {
		switch {
		case fn.Works:
			tried := "a signature verified against the certificate"
			if c := r.Certificate; c != nil && c.Source != "token" {
				tried += " " + certSource(c) // the file's: a token may show none
			}
			if fn.Function == FunctionCertLogin {
				tried = "32 random bytes encrypted to the certificate, decrypted on the token"
				if r.Key.Type == "GOST" {
					tried = "a challenge sealed to the certificate as the service seals it, opened on the token"
				}
			}
			fmt.Fprintf(w, "%s: yes (%s, %s); %s: median %.1f ms of %d (%.1f to %.1f)\n", fn.Function, shape, fn.Uses, tried,
				fn.Timing.MedianMS, fn.Timing.Rounds, fn.Timing.MinMS, fn.Timing.MaxMS)
		case fn.Why == gostkeyx.NotOffered:
			fmt.Fprintf(w, "%s: %s\n", fn.Function, fn.Why) // not a failure
		default:
			fmt.Fprintf(w, "%s: no: %s\n", fn.Function, whyNot(fn))
		}
		for _, n := range fn.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
		writeWays(w, fn.Ways)
	}
	switch p := r.PIN; {
	case p == nil:
		fmt.Fprintln(w, "PIN: the token's flags could not be read again")
	case p.Locked:
		fmt.Fprintln(w, "PIN: the token says it is locked (CKF_USER_PIN_LOCKED)")
	case p.FinalTry:
		fmt.Fprintln(w, "PIN: the token says one more wrong PIN locks it (CKF_USER_PIN_FINAL_TRY)")
	case p.CountLow:
		fmt.Fprintln(w, "PIN: the token says a wrong PIN was entered (CKF_USER_PIN_COUNT_LOW)")
	default:
		fmt.Fprintln(w, "PIN: no wrong tries reported (CKF_USER_PIN_COUNT_LOW, FINAL_TRY and LOCKED are clear; many modules never set them)")
	}
	return nil
}

// writeResult prints what --removal measured, if it ran, and the result.
func writeResult(w io.Writer, r CheckReport) error {
	if r.Removal != nil {
		r.Removal.write(w)
	}
	_, err := fmt.Fprintf(w, "result: %s\n", map[bool]string{true: "every function the key allows works", false: "FAILED"}[r.OK])
	return err
}

// certSource says where the certificate came from.
func certSource(c *checkCert) string {
	if c.Source == "token" {
		return "from the token"
	}
	return "from " + c.Source
}

func yesNo(b bool) string { return map[bool]string{true: "yes", false: "no"}[b] }
