package setupcmd

import (
	"cmp"
	"context"
	"crypto"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/inspect"
	"github.com/signagent/signagent/pkcs11/locate"
	"github.com/signagent/signagent/pkcs11/pinfile"
	"github.com/signagent/signagent/pkcs11/probe"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
	"github.com/signagent/signagent/pkcs11/uri"
	"github.com/signagent/signagent/signer"
)

// setup's token questions: the module (and SoftHSM's configuration file),
// the signing key picked from the certificates the module's tokens hold,
// the PIN file, and a signature tried with them.

// tokenAnswers picks the signing key: the module (offered: the flag or
// SIGNAGENT_PKCS11_MODULE, the context's, else the first in the usual
// places), SoftHSM's configuration file with a module that loads SoftHSM,
// then the key from the certificates on the module's tokens, the PIN
// file, and a signature tried with them. The module is kept in the
// context with the key, so that no variable is needed to find it again.
func (r *setupRun) tokenAnswers() error {
	if m, err := locate.ResolveFrom("", "default", locate.DefaultModules); err == nil {
		r.found["module"] = m.Path
	}
	exists := func(v string) error { _, err := locate.ResolveFrom(v, "flag", nil); return err }
	var module string
	if r.ask {
		v, err := r.answer("module", "PKCS#11 module (module)", true, exists)
		if err != nil {
			return err
		}
		module = v
	} else if r.o.Given["module"] != "" || r.o.Given["key"] != "" {
		// Without --module (and its variable), a key is looked for in
		// the module found in the usual places, which is kept.
		v := r.o.Given["module"]
		if v == "" {
			v = r.found["module"]
			if v == "" {
				r.problems = append(r.problems, "--module: needed for --key (no PKCS#11 module in the usual places)")
				return nil
			}
			if err := r.set("module", v); err != nil {
				return err
			}
		}
		if _, err := r.answer("module", "", true, exists); err != nil {
			return err
		}
		module = r.answers["module"]
	}
	if module == "" {
		fmt.Fprintln(r.e.Stderr, "  no PKCS#11 module: no signing key is set")
		return nil
	}
	if err := r.softHSMConf(module); err != nil {
		return err
	}
	if err := probe.Module(r.ctx, module); err != nil {
		r.problems = append(r.problems, fmt.Sprintf("--module: %v", err))
		if r.ask {
			return err
		}
		return nil
	}
	if err := r.pickKey(module); err != nil {
		return err
	}
	if r.answers["key"] == "" {
		return nil
	}
	if err := r.certificateFile(module); err != nil {
		return err
	}
	if _, err := r.answer("pin-file", "File holding the token's PIN (pin-file)", true,
		secretFile("the PIN", pinfile.Secret("").Parse)); err != nil {
		return err
	}
	if len(r.problems) > 0 || r.o.NoSignature {
		return nil
	}
	return r.trySignature()
}

// loadsSoftHSM says whether module is SoftHSM's, or p11-kit's proxy,
// which loads the SoftHSM that Debian's softhsm2 registers.
func loadsSoftHSM(module string) bool {
	return strings.Contains(filepath.Base(module), "softhsm") || slices.Contains(locate.ProxyModules, module) ||
		filepath.Base(module) == "p11-kit-proxy.so"
}

// softHSMConf asks for SoftHSM's configuration file (SOFTHSM2_CONF is
// offered: dev-token's lines set it) when module loads SoftHSM, and puts
// it in this process's environment before the module is loaded, as every
// command does with the context's (settings.File.Export).
func (r *setupRun) softHSMConf(module string) error {
	if !loadsSoftHSM(module) {
		return nil
	}
	v, err := r.answer("softhsm2-conf", "SoftHSM's configuration file (softhsm2-conf; Enter for SoftHSM's default)", true, func(v string) error {
		st, err := os.Stat(v)
		if err != nil {
			return fmt.Errorf("SoftHSM's configuration file: %w", err)
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("SoftHSM's configuration file %s is not a regular file", v)
		}
		return nil
	})
	if err != nil || v == "" {
		return err
	}
	return os.Setenv(settings.EnvKeys["softhsm2-conf"], v)
}

// keyChoice is a certificate on a token, whose key may sign, or a key
// whose token shows no certificate for it (noCert: its file is asked).
type keyChoice struct {
	uri, token, label string
	noCert            bool
}

// keyChoices lists the certificates on the module's initialized tokens,
// each with the URI of its key; show prints them numbered.
func (r *setupRun) keyChoices(module string, show bool) ([]keyChoice, error) {
	tokens, err := pkcs11.ListTokens(r.ctx, module)
	if err != nil {
		return nil, err
	}
	var out []keyChoice
	for _, t := range tokens {
		if !t.Initialized {
			continue // an empty slot holds no key
		}
		objs, err := inspect.ListObjects(r.ctx, module, tokeninfo.TokenSelector{Label: t.Label, Serial: t.Serial}, "")
		if err != nil {
			continue
		}
		for _, o := range objs {
			if o.Class != "certificate" {
				continue
			}
			out = append(out, keyChoice{strings.TrimSuffix(o.URI, ";type=cert"), t.Label, o.Label, false})
			if show {
				fmt.Fprintf(r.e.Stderr, "  %d. token %q: %s (%s %d, expires %s, %s)\n", len(out), t.Label, o.Label, o.KeyType, o.Bits,
					o.NotAfter.Format(time.DateOnly), o.Subject)
			}
		}
		for _, o := range uncertified(objs) {
			out = append(out, keyChoice{strings.TrimSuffix(o.URI, ";type=public"), t.Label, o.Label, true})
			if show {
				fmt.Fprintf(r.e.Stderr, "  %d. token %q: %s (%s %d, no certificate on the token: its file is asked next)\n", len(out), t.Label, o.Label, o.KeyType, o.Bits)
			}
		}
	}
	return out, nil
}

// labelled is the choice SIGNAGENT_TOKEN_LABEL and SIGNAGENT_KEY_LABEL
// name (dev-token's lines set them), when they name exactly one.
func labelled(choices []keyChoice) string {
	tok, key := os.Getenv("SIGNAGENT_TOKEN_LABEL"), os.Getenv("SIGNAGENT_KEY_LABEL")
	if tok == "" && key == "" {
		return ""
	}
	var found []string
	for _, c := range choices {
		if (tok == "" || c.token == tok) && (key == "" || c.label == key) {
			found = append(found, c.uri)
		}
	}
	if len(found) != 1 {
		return ""
	}
	return found[0]
}

// pickKey chooses the signing key: interactively from the certificates on
// the module's tokens (by number or URI), else --key (SIGNAGENT_KEY_URI),
// else the one the label variables name.
func (r *setupRun) pickKey(module string) error {
	if !r.ask {
		k := r.o.Given["key"]
		if k == "" {
			choices, err := r.keyChoices(module, false)
			if err != nil {
				r.problems = append(r.problems, fmt.Sprintf("--module: %v", err))
				return nil
			}
			if k = labelled(choices); k == "" {
				return nil
			}
		}
		if _, err := uri.Parse(k); err != nil {
			r.problems = append(r.problems, fmt.Sprintf("--key: %v", err))
		} else {
			r.answers["key"] = k
		}
		return nil
	}
	choices, err := r.keyChoices(module, true)
	if err != nil {
		return err
	}
	if len(choices) == 0 {
		fmt.Fprintf(r.e.Stderr, "  no certificate on the tokens %s sees: no signing key is set\n", module)
		return nil
	}
	r.found["key"] = cmp.Or(labelled(choices), r.found["key"])
	_, err = r.answer("key", fmt.Sprintf("Signing key (1-%d, or a pkcs11: URI)", len(choices)), true, func(v string) error {
		if n, err := strconv.Atoi(v); err == nil {
			if n < 1 || n > len(choices) {
				return fmt.Errorf("want 1 to %d", len(choices))
			}
			return nil
		}
		_, err := uri.Parse(v)
		return err
	})
	if n, err := strconv.Atoi(r.answers["key"]); err == nil {
		r.answers["key"] = choices[n-1].uri
	}
	return err
}

// trySignature signs a text for a test credential with the chosen key,
// as sign would, and verifies it; it needs the API key and the PIN.
func (r *setupRun) trySignature() error {
	if r.answers["api-key-file"] == "" {
		fmt.Fprintln(r.e.Stderr, "  no API key file: the signature is not tried")
		return nil
	}
	for _, k := range []string{"module", "key", "certificate-file", "pin-file", "api-key-file"} {
		if v := r.answers[k]; v != "" {
			if err := r.set(k, v); err != nil {
				return err
			}
		}
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	err := func() error {
		key, err := cmdutil.APIKeyFrom(r.f.Settings())
		if err != nil {
			return err
		}
		key2, err := r.f.Key(ctx)
		if err != nil {
			return err
		}
		cms := &signer.CMS{Key: key2, Cert: key2.Certificate(), Options: signer.Options{Hash: crypto.SHA256}}
		cred, _ := canonical.Parse(canonical.Phone, "9161234567", canonical.Options{})
		now := canonical.Now()
		text := canonical.Text(key, cred, now)
		der, err := cms.SignText(ctx, text, now)
		if err != nil {
			return err
		}
		if _, err := signer.Verify(der, text, nil); err != nil {
			return fmt.Errorf("the signature does not verify: %w", err)
		}
		fmt.Fprintf(r.e.Stderr, "  signature: made on the token and verified (certificate %s)\n", canonical.ThumbprintOf(cms.Cert))
		return nil
	}()
	if err != nil {
		if !r.ask {
			r.problems = append(r.problems, fmt.Sprintf("the signature: %v", err))
			return nil
		}
		return fmt.Errorf("setup: the signature: %w (nothing was written)", err)
	}
	return nil
}
