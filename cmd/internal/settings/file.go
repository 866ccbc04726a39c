package settings

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"gopkg.in/yaml.v3"
)

// File is a settings file: YAML keyed by the flags' names (without the
// dashes), with named contexts as kubeconfig has them:
//
//	log-level: info              # every context
//	current-context: staging
//	contexts:
//	  staging:
//	    business-url: https://api.staging.example
//	    api-key-file: /home/op/.config/signagent/staging.key
//	  production:
//	    business-url: https://api.example
//
// A key of the chosen context beats the same key at the top. A file never
// holds a secret: the keys that would (pin, api-key, ...) are refused;
// their -file keys are fine.
type File struct {
	Path string
	// Context is the context chosen (--context, $SIGNAGENT_CONTEXT or
	// current-context); "" when none is.
	Context string
	// Current is the file's current-context.
	Current string
	// Contexts are the contexts' names, in the file's order.
	Contexts []string
	// Renamed are the old keys the file holds (see Renamed), read as
	// their new ones.
	Renamed []string
	values  map[string]any
	lines   map[string]int
}

// Keys of a file that are not settings.
const (
	keyContexts = "contexts"
	keyCurrent  = "current-context"
)

// SecretKeys are the keys a settings file may not hold, each with the key
// that names the file holding the secret instead.
var SecretKeys = map[string]string{
	"pin": "pin-file", "api-key": "api-key-file", "developer-key": "developer-key-file",
	"client-secret": "client-secret-file", "password": "password-file", "sid": "sid-file",
	"store-password": "store-password-file", "bearer-token": "bearer-token-file", "refresh-token": "refresh-token-file",
}

// DefaultPath is the settings file read when none is named:
// $XDG_CONFIG_HOME/signagent/config.yaml, else
// ~/.config/signagent/config.yaml ("" without a home).
func DefaultPath() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "signagent", "config.yaml")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".config", "signagent", "config.yaml")
	}
	return ""
}

// ReadFile reads the settings file at path for context ("" chooses the
// file's current-context, if any). A file that is not there is empty
// unless must is set. The file must be this user's (or root's), not
// writable by others and not readable by every user, as ssh asks of its
// own; a
// key that known refuses, a secret key, or a context that is not there is
// an error naming the file and the line.
func ReadFile(path, context string, must bool, known func(key string) bool) (*File, error) {
	f := &File{Path: path, values: map[string]any{}, lines: map[string]int{}}
	if path == "" || path == os.DevNull {
		return f, checkContext(f, context)
	}
	b, found, err := readSettings(path, must)
	if err != nil {
		return nil, err
	}
	if !found {
		return f, checkContext(f, context)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, bad(fmt.Errorf("%s is not YAML: %w", path, err))
	}
	if len(doc.Content) == 0 {
		return f, checkContext(f, context)
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, bad(fmt.Errorf("%s:%d: want settings as key: value lines", path, root.Line))
	}
	top, contexts := map[string]any{}, map[string]map[string]any{}
	topLines, ctxLines := map[string]int{}, map[string]map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case keyCurrent:
			if v.Kind != yaml.ScalarNode {
				return nil, bad(fmt.Errorf("%s:%d: current-context: want a context's name", path, v.Line))
			}
			f.Current = v.Value
		case keyContexts:
			if v.Kind != yaml.MappingNode {
				return nil, bad(fmt.Errorf("%s:%d: contexts: want NAME: {settings} entries", path, v.Line))
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				name, body := v.Content[j], v.Content[j+1]
				if body.Kind != yaml.MappingNode && !(body.Kind == yaml.ScalarNode && body.Tag == "!!null") {
					return nil, bad(fmt.Errorf("%s:%d: context %q: want key: value settings", path, body.Line, name.Value))
				}
				m, lines, err := settingsOf(path, body, known)
				if err != nil {
					return nil, err
				}
				f.Contexts = append(f.Contexts, name.Value)
				contexts[name.Value], ctxLines[name.Value] = m, lines
			}
		default:
			if err := checkKey(path, k, known); err != nil {
				return nil, err
			}
			var x any
			if err := v.Decode(&x); err != nil {
				return nil, bad(fmt.Errorf("%s:%d: %s: %w", path, v.Line, k.Value, err))
			}
			top[k.Value], topLines[k.Value] = x, k.Line
		}
	}
	if f.Current != "" && contexts[f.Current] == nil && !slices.Contains(f.Contexts, f.Current) {
		return nil, bad(fmt.Errorf("%s: current-context %q is not among the contexts (%s); run signagent config use-context NAME", path, f.Current, names(f.Contexts)))
	}
	if err := checkContext(f, context); err != nil {
		return nil, err
	}
	met := renamedKeys(top, topLines)
	for name, m := range contexts {
		met = append(met, renamedKeys(m, ctxLines[name])...)
	}
	slices.Sort(met)
	f.Renamed = slices.Compact(met)
	for k, v := range top {
		f.values[k], f.lines[k] = v, topLines[k]
	}
	for k, v := range contexts[f.Context] {
		f.values[k], f.lines[k] = v, ctxLines[f.Context][k]
	}
	return f, nil
}

// checkContext sets the chosen context: the one asked for, which must be
// in the file, else the file's current one.
func checkContext(f *File, context string) error {
	if context == "" {
		f.Context = f.Current
		return nil
	}
	if !slices.Contains(f.Contexts, context) {
		where := f.Path
		if where == "" {
			where = "the settings file"
		}
		return bad(fmt.Errorf("no context %q in %s (contexts: %s)", context, where, names(f.Contexts)))
	}
	f.Context = context
	return nil
}

func names(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return fmt.Sprint(l)
}

// settingsOf reads a context's settings.
func settingsOf(path string, n *yaml.Node, known func(string) bool) (map[string]any, map[string]int, error) {
	m, lines := map[string]any{}, map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == keyContexts || k.Value == keyCurrent {
			return nil, nil, bad(fmt.Errorf("%s:%d: %s belongs at the top of the file, not in a context", path, k.Line, k.Value))
		}
		if err := checkKey(path, k, known); err != nil {
			return nil, nil, err
		}
		var x any
		if err := v.Decode(&x); err != nil {
			return nil, nil, bad(fmt.Errorf("%s:%d: %s: %w", path, v.Line, k.Value, err))
		}
		m[k.Value], lines[k.Value] = x, k.Line
	}
	return m, lines, nil
}

// checkKey refuses a secret key and one that known does not accept.
func checkKey(path string, k *yaml.Node, known func(string) bool) error {
	if file, secret := SecretKeys[k.Value]; secret {
		return bad(fmt.Errorf("%s:%d: %q would put a secret in the settings file, which never holds one: keep it in a file only you can read and name that file with %s", path, k.Line, k.Value, file))
	}
	key := k.Value
	if now, ok := Renamed[key]; ok {
		key = now
	}
	if known != nil && !known(key) {
		return bad(fmt.Errorf("%s:%d: unknown setting %q: the keys are the flags' names without the dashes (signagent COMMAND --help lists them), and contexts and current-context", path, k.Line, k.Value))
	}
	return nil
}

// maxFile is the most a settings file may hold.
const maxFile = 1 << 20

// readSettings opens the settings file once and reads it from that
// descriptor, checked first by checkOwner through fstat: the file whose
// owner and mode were checked is the file read, whatever the path names
// meanwhile. (A symbolic link is followed, as before.) found is false,
// with no error, when it is not there and need not be.
func readSettings(path string, must bool) (b []byte, found bool, err error) {
	// O_NONBLOCK: a FIFO put there does not block the open; fstat then
	// refuses it before anything is read.
	fd, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) && !must {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, bad(fmt.Errorf("could not read the settings file: %w", err))
	}
	defer fd.Close()
	b, err = readOpened(fd, path)
	return b, true, err
}

// readOpened checks the open settings file's owner and mode and reads it
// (at most maxFile bytes) from the same descriptor.
func readOpened(fd *os.File, path string) ([]byte, error) {
	st, err := fd.Stat()
	if err != nil {
		return nil, bad(fmt.Errorf("could not read the settings file: %w", err))
	}
	if err := checkOwner(path, st); err != nil {
		return nil, err
	}
	if st.Size() > maxFile {
		return nil, bad(fmt.Errorf("%s holds %d bytes, more than the %d a settings file may", path, st.Size(), maxFile))
	}
	b, err := io.ReadAll(io.LimitReader(fd, maxFile+1))
	if err != nil {
		return nil, bad(fmt.Errorf("could not read the settings file %s: %w", path, err))
	}
	if len(b) > maxFile {
		return nil, bad(fmt.Errorf("%s holds more than the %d bytes a settings file may", path, maxFile))
	}
	return b, nil
}

// checkOwner refuses a settings file another user could have written, or
// that every user can read, as ssh refuses its configuration: this user's
// or root's, not writable by group or others, not readable by others (it
// names the token, the key and the secrets' files). A group may read it.
func checkOwner(path string, st fs.FileInfo) error {
	if !st.Mode().IsRegular() {
		return bad(fmt.Errorf("%s is not a regular file", path))
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		if uid := int(sys.Uid); uid != os.Getuid() && uid != 0 {
			return bad(fmt.Errorf("%s belongs to another user (uid %d): a settings file must be yours", path, uid))
		}
	}
	if m := st.Mode().Perm(); m&0o022 != 0 {
		return bad(fmt.Errorf("%s has mode %04o: others may change it; run chmod go-w,o-r %s", path, m, path))
	} else if m&0o004 != 0 {
		return bad(fmt.Errorf("%s has mode %04o: every user may read it; run chmod o-r %s (a group, such as the agent's clients, may read it)", path, m, path))
	}
	return nil
}

// Where names where the file sets key: the file, its context and line.
func (f *File) Where(key string) string {
	if l, ok := f.lines[key]; ok {
		return fmt.Sprintf("%s:%d", f.Path, l)
	}
	return f.Path
}

// Value is a key's value in the file for the chosen context (the
// context's, else the top's).
func (f *File) Value(key string) (any, bool) {
	v, ok := f.values[key]
	return v, ok
}

// EnvKeys are settings read by a library signagent loads rather than by
// signagent, from the environment, each with its variable: SoftHSM finds
// its tokens through the configuration file SOFTHSM2_CONF names, so a
// context that uses a SoftHSM token keeps that file under softhsm2-conf.
var EnvKeys = map[string]string{"softhsm2-conf": "SOFTHSM2_CONF"}

// Export puts the chosen context's EnvKeys in the environment, before any
// module is loaded, each only when the variable is not set: a variable
// beats the file, as for every setting. A relative path would name
// another file in another directory: it is refused.
func (f *File) Export() error {
	for key, env := range EnvKeys {
		v, ok := f.values[key]
		if !ok {
			continue
		}
		if _, set := os.LookupEnv(env); set {
			continue
		}
		p := fmt.Sprint(v)
		if !filepath.IsAbs(p) {
			return bad(fmt.Errorf("%s: %s: want an absolute path, not %q", f.Where(key), key, p))
		}
		if err := os.Setenv(env, p); err != nil {
			return bad(fmt.Errorf("%s: %s: %w", f.Where(key), key, err))
		}
	}
	return nil
}
