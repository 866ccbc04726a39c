package pkcs11test

import (
	"crypto/x509"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/signagent/signagent/pkcs11/softhsm"
)

// Generating an RSA-2048 key on SoftHSM was most of a short test's time,
// and every test made its own. A test binary now generates the keys of a
// shape of token once, keeps the token's files in memory, and writes them
// into each later test's own token directory: a copy that test alone
// changes (its PIN tries, a lock, a token moved away), so tests stay as
// isolated as before, and nothing is left on disk between tests.
//
// A test's n-th token of a shape is a copy of the n-th one made, counting
// the tokens of the test's parents too, so two tokens one test holds (an
// untrusted signer beside the trusted one) still hold different keys.

// madeTokens are the tokens kept for copies, by shape, in the order made.
var madeTokens struct {
	sync.Mutex
	shapes map[string][]*tokenFiles
	counts map[string]int // tokens made so far by test name, by shape
}

// tokenFiles is a token's files under its directory sub, with what its
// keys' certificates and serial were.
type tokenFiles struct {
	sub     string            // the directory under the token's they are in
	files   map[string][]byte // path relative to sub
	dirs    []string
	serial  string
	rsa, ec *x509.Certificate
}

// tokenShape names the n-th token of shape o that test t asks for.
type tokenShape struct {
	key string
	nth int
}

// copyShape counts t's token of shape o and names it.
func copyShape(t testing.TB, o Options) tokenShape {
	key := fmt.Sprintf("%q %#v", o.Label, o.Extra)
	madeTokens.Lock()
	defer madeTokens.Unlock()
	if madeTokens.counts == nil {
		madeTokens.counts = map[string]int{}
		madeTokens.shapes = map[string][]*tokenFiles{}
	}
	// The test's own and its parents' tokens of this shape.
	name, nth := t.Name(), 0
	for i := range name {
		if name[i] == '/' {
			nth += madeTokens.counts[name[:i]+"\x00"+key]
		}
	}
	own := name + "\x00" + key
	nth += madeTokens.counts[own]
	if madeTokens.counts[own] == 0 {
		t.Cleanup(func() {
			madeTokens.Lock()
			delete(madeTokens.counts, own)
			madeTokens.Unlock()
		})
	}
	madeTokens.counts[own]++
	return tokenShape{key: key, nth: nth}
}

// madeToken returns the token kept for shape, or nil when none was made.
func madeToken(shape tokenShape) *tokenFiles {
	madeTokens.Lock()
	defer madeTokens.Unlock()
	if made := madeTokens.shapes[shape.key]; shape.nth < len(made) {
		return made[shape.nth]
	}
	return nil
}

// keepToken reads tk's token files for later copies of shape. SoftHSM has
// written them all by the time C_Finalize returned.
func keepToken(shape tokenShape, tk *Token) error { return keepTokenDir(shape, tk, "tokens") }

// keepTokenDir reads the files under tk's directory sub for later copies
// of shape.
func keepTokenDir(shape tokenShape, tk *Token, sub string) error {
	tf, err := readTokenFiles(tk, sub)
	if err != nil {
		return err
	}
	madeTokens.Lock()
	defer madeTokens.Unlock()
	if len(madeTokens.shapes[shape.key]) == shape.nth {
		madeTokens.shapes[shape.key] = append(madeTokens.shapes[shape.key], tf)
	}
	return nil
}

// readTokenFiles reads the files under tk's directory sub.
func readTokenFiles(tk *Token, sub string) (*tokenFiles, error) {
	root := filepath.Join(tk.Dir, sub)
	tf := &tokenFiles{sub: sub, files: map[string][]byte{}, serial: tk.Serial, rsa: tk.RSA.Cert, ec: tk.EC.Cert}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			tf.dirs = append(tf.dirs, rel)
			return nil
		}
		b, err := os.ReadFile(path)
		tf.files[rel] = b
		return err
	})
	return tf, err
}

// Twin is a second SoftHSM token with tk's keys, certificates, label and
// PIN, in a directory of its own: what two hosts, each with its own token
// holding the same key, look like to two agents. It is made while nobody
// uses tk (SoftHSM's files are read as they are).
func (tk *Token) Twin(t testing.TB) *Token {
	t.Helper()
	tf, err := readTokenFiles(tk, "tokens")
	if err != nil {
		t.Fatal(err)
	}
	twin := *tk
	twin.Dir = t.TempDir()
	if twin.Conf, err = softhsm.WriteConfig(twin.Dir); err != nil {
		t.Fatal(err)
	}
	if err := tf.copyTo(twin.Dir); err != nil {
		t.Fatal(err)
	}
	twin.PINFile = filepath.Join(twin.Dir, "pin")
	if err := os.WriteFile(twin.PINFile, []byte(tk.PIN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &twin
}

// copyTo writes the token's files into the same directory under dir
// (tokens for SoftHSM), private to the user as SoftHSM makes them.
func (tf *tokenFiles) copyTo(dir string) error {
	root := filepath.Join(dir, tf.sub)
	for _, d := range tf.dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return err
		}
	}
	for rel, b := range tf.files {
		if err := os.WriteFile(filepath.Join(root, rel), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
