package pinfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/safefile"
)

func TestSecretFileModes(t *testing.T) {
	dir := t.TempDir()
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o400: true, 0o640: true, 0o644: false, 0o606: false, 0o666: false} {
		p := filepath.Join(dir, fmt.Sprintf("pin-%o", mode))
		os.WriteFile(p, []byte("123456\n"), 0o600)
		os.Chmod(p, mode)
		pin, err := Read(p)
		if ok != (err == nil) {
			t.Errorf("mode %04o: err=%v", mode, err)
		}
		if ok && pin != "123456" {
			t.Errorf("mode %04o: pin %q", mode, pin)
		}
		if !ok && (!errors.Is(err, safefile.ErrSecretMode) || !errors.Is(err, tokenerr.ErrPINMissing) || strings.Contains(err.Error(), "123456")) {
			t.Errorf("mode %04o: %v", mode, err)
		}
	}
}
