package softhsm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteConfig(t *testing.T) {
	dir := t.TempDir()
	conf, err := WriteConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(conf)
	if !strings.Contains(string(b), "directories.tokendir = "+filepath.Join(dir, "tokens")+"\n") {
		t.Fatalf("config does not point at the token directory:\n%s", b)
	}
	for _, p := range []string{conf, filepath.Join(dir, "tokens")} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Fatalf("%s is readable by others: %v", p, st.Mode())
		}
	}
}
