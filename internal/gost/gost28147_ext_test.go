package gost_test

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/signagent/signagent/internal/gost"
	"github.com/signagent/signagent/signer/signertest"
)

// OpenSSL's gost engine, nobody here wrote, encrypts 3000 bytes in GOST
// 28147-89 CFB with CryptoPro key meshing (openssl enc -gost89) to the same
// bytes as NewCFBEncrypter, under each content S-box: the meshing points
// at 1024 and 2048 bytes included. Its gost-mac (IMIT, zero IV) agrees
// with IMIT over one block, a short block and several.
func TestCFBAndIMITAgainstOpenSSL(t *testing.T) {
	bin := signertest.NeedTool(t, "openssl")
	conf := signertest.GOSTEngineConf(t)
	base, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(3*i + 1)
	}
	iv := []byte{8, 7, 6, 5, 4, 3, 2, 1}
	pt := make([]byte, 3000)
	for i := range pt {
		pt[i] = byte(i*13 + i>>8)
	}
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, pt, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(s *gost.SBox, args ...string) []byte {
		t.Helper()
		// The engine takes the S-box of -gost89 from CRYPT_PARAMS.
		c := filepath.Join(dir, s.Name+".cnf")
		os.WriteFile(c, append(append([]byte{}, base...), "CRYPT_PARAMS = "+s.OID.String()+"\n"...), 0o600)
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "OPENSSL_CONF="+c)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("openssl %v: %v", args, err)
		}
		return out
	}
	for _, s := range []*gost.SBox{gost.SBoxCryptoProA, gost.SBoxTC26Z} {
		want := run(s, "enc", "-gost89", "-K", hex.EncodeToString(key), "-iv", hex.EncodeToString(iv), "-in", in)
		e, err := gost.NewCFBEncrypter(key, iv, s, true)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(pt))
		e.XORKeyStream(got, pt)
		if !bytes.Equal(got, want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Errorf("%s: CFB differs from openssl's from byte %d (of %d, %d)", s.Name, i, len(got), len(want))
		}
	}
	for _, n := range []int{8, 5, 32, 1000} {
		os.WriteFile(in, pt[:n], 0o600)
		out := run(gost.SBoxCryptoProA, "dgst", "-mac", "gost-mac", "-macopt", "hexkey:"+hex.EncodeToString(key), "-r", in)
		got, err := gost.IMIT(key, make([]byte, 8), pt[:n], gost.SBoxCryptoProA)
		if err != nil || string(out[:8]) != hex.EncodeToString(got) {
			t.Errorf("IMIT of %d bytes = %x, %v; openssl says %s", n, got, err, out)
		}
	}
}
