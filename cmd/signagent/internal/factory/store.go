package factory

import (
	"errors"
	"fmt"
	"strings"

	"github.com/signagent/signagent/cmd/internal/cmdutil"
	"github.com/signagent/signagent/cmd/internal/settings"
	"github.com/signagent/signagent/oidc"
	"github.com/signagent/signagent/store"
)

// Store is the run's --store, opened the first time it is asked for and
// closed with the factory: nil for local (see openStore).
func (f *Factory) Store() (*store.Shared, error) {
	return f.storeOnce.get(&f.mu, func() (*store.Shared, error) { return openStore(f.s) })
}

// openStore opens --store, once for a command or a configuration: nil
// for local (OpenID Connect records in the --token-store files, sessions
// and legacy tokens in this process's memory), else the store several
// agents share, with the key file and the password (a file or the
// environment: never the URL, never a flag's value). The URL is read by
// store.Open alone, and its mistakes are said before the key's.
func openStore(s *settings.Settings) (*store.Shared, error) {
	st := cmdutil.ReadStore(s)
	if !st.Shared() {
		return nil, nil
	}
	u := st.URL
	var errs []error
	var sealer *store.Sealer
	if f := st.KeyFile; f == "" {
		errs = append(errs, errors.New("a shared store needs --store-key-file (SIGNAGENT_STORE_KEY_FILE); make one with signagent store-key --out FILE"))
	} else if k, err := store.LoadKeyFile(f); err != nil {
		errs = append(errs, err)
	} else {
		sealer = k
	}
	var password string
	if src := cmdutil.StorePasswordSpec.Source(s); src.Given() {
		got, err := src.Resolve()
		if err != nil {
			errs = append(errs, err)
		}
		password = got.Value
	}
	wait := st.WaitReplicas
	if wait == 0 {
		wait = -1 // none
	}
	r, err := store.Open(u, store.Options{Password: password, CAFile: st.CAFile, Insecure: st.Insecure, Prefix: st.Prefix, Sealer: sealer, WaitReplicas: wait})
	switch {
	case errors.Is(err, store.ErrBadURL):
		return nil, cmdutil.UsageErr(fmt.Errorf("--store (local, or a shared store's URL): %w", err))
	case err != nil && !errors.Is(err, store.ErrBadKey):
		return nil, cmdutil.UsageErr(err)
	}
	if len(errs) > 0 {
		jerr := joinErrors(errs)
		if r != nil {
			r.Close()
		}
		return nil, cmdutil.UsageErr(jerr)
	}
	if err != nil {
		return nil, cmdutil.UsageErr(err)
	}
	return r, nil
}

// OIDCRecords is where the run keeps OpenID Connect records: the shared
// store (--store), else the files.
func (f *Factory) OIDCRecords() (oidc.Records, error) {
	st, err := f.Store()
	if err != nil {
		return nil, err
	}
	return oidcRecords(f.Settings(), st)
}

// oidcRecords are the OpenID Connect records in st when there is one,
// else in --token-store, else in the default directory.
func oidcRecords(s *settings.Settings, st *store.Shared) (oidc.Records, error) {
	if st != nil {
		return &oidc.InStore{S: st, Name: cmdutil.ReadStore(s).URL}, nil
	}
	if d := cmdutil.ReadOIDC(s).TokenStore; d != "" {
		return oidc.Files{Dir: d}, nil
	}
	d, err := oidc.DefaultDir()
	return oidc.Files{Dir: d}, err
}

// joinErrors is errs on one line, "; " between them (errors.Join puts a
// newline between, and an error is said on one line), each still found
// by errors.Is.
func joinErrors(errs []error) error {
	verbs := strings.TrimSuffix(strings.Repeat("%w; ", len(errs)), "; ")
	args := make([]any, len(errs))
	for i, err := range errs {
		args[i] = err
	}
	return fmt.Errorf(verbs, args...)
}
