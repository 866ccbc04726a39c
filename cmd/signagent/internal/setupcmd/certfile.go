package setupcmd

import (
	"fmt"
	"slices"

	"github.com/signagent/signagent/pkcs11"
	"github.com/signagent/signagent/pkcs11/inspect"
	"github.com/signagent/signagent/pkcs11/uri"
)

// uncertified are the public keys of objs with no certificate of their id
// beside them: a GOST card behind OpenSC shows no GOST-2012 certificate,
// so its key's certificate comes from a file.
func uncertified(objs []inspect.Object) []inspect.Object {
	var out []inspect.Object
	for _, o := range objs {
		if o.Class != "public-key" || o.ID == "" {
			continue
		}
		if !slices.ContainsFunc(objs, func(c inspect.Object) bool { return c.Class == "certificate" && c.ID == o.ID }) {
			out = append(out, o)
		}
	}
	return out
}

// certificateFile asks for the key's certificate file when the key chosen
// has none on its token (or takes --certificate-file, whenever given): a
// certificate, checked when the signature is tried.
func (r *setupRun) certificateFile(module string) error {
	noCert := false
	chosen, err := uri.Parse(r.answers["key"])
	if choices, lerr := r.keyChoices(module, false); err == nil && lerr == nil {
		// The choice the key's URI names (it may name less than a choice's).
		i := slices.IndexFunc(choices, func(c keyChoice) bool {
			u, err := uri.Parse(c.uri)
			return err == nil && (chosen.Token == "" || chosen.Token == u.Token) && (chosen.Serial == "" || chosen.Serial == u.Serial) &&
				(chosen.Object == "" || chosen.Object == u.Object) && (len(chosen.ID) == 0 || string(chosen.ID) == string(u.ID))
		})
		noCert = i >= 0 && choices[i].noCert
	}
	if !noCert && r.o.Given["certificate-file"] == "" {
		delete(r.answers, "certificate-file")
		return nil
	}
	if noCert && !r.ask && r.o.Given["certificate-file"] == "" {
		r.problems = append(r.problems, "--certificate-file: needed: the token shows no certificate for the key")
		return nil
	}
	check := func(v string) error {
		_, err := pkcs11.ReadCertificate(v)
		return err
	}
	question := "The key's certificate file, PEM or DER (certificate-file): the token shows none for it"
	if _, err := r.answer("certificate-file", question, !noCert, check); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	return nil
}
