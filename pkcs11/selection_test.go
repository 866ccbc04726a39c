package pkcs11

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/signagent/signagent/pkcs11/locate"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
	"github.com/signagent/signagent/pkcs11/uri"
)

func TestParseURISlotModuleNameVendor(t *testing.T) {
	u, err := uri.Parse("pkcs11:token=t;slot-id=7;x-vendor=1?module-name=softhsm2&x-flavour=a")
	if err != nil {
		t.Fatal(err)
	}
	if !u.HasSlot || u.SlotID != 7 || u.ModuleName != "softhsm2" || strings.Join(u.Ignored, ",") != "x-vendor,x-flavour" {
		t.Fatalf("%+v", u)
	}
	for _, bad := range []string{
		"pkcs11:slot-id=seven", "pkcs11:slot-id=-1", "pkcs11:slot-id=99999999999",
		"pkcs11:token=t?module-name=/usr/lib/x.so", "pkcs11:token=t?module-name=", "pkcs11:token=t?color=red",
	} {
		if _, err := uri.Parse(bad); !errors.Is(err, tokenerr.ErrBadURI) {
			t.Errorf("uri.Parse(%q) err=%v", bad, err)
		}
	}
}

// moduleConfDir writes p11-kit module configuration files into a new
// directory.
func moduleConfDir(t *testing.T, files map[string]string) string {
	t.Helper()
	d := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestModuleByName(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libfake.so")
	os.WriteFile(lib, []byte("not really"), 0o644)
	user := moduleConfDir(t, map[string]string{"mine.module": "# a comment\nmodule: " + lib + "\ncritical: yes\n"})
	system := moduleConfDir(t, map[string]string{
		"mine.module":     "module: /elsewhere/libother.so\n",
		"nolib.module":    "critical: yes\n",
		"relative.module": "module: libsurely-not-installed-here.so\n",
	})
	dirs := []string{user, system}

	got, err := locate.ModuleByName("mine", dirs)
	if err != nil || got != lib {
		t.Fatalf("mine: %q, %v (the first directory wins)", got, err)
	}
	for name, want := range map[string]string{
		"no-such":  "registered: mine, nolib, relative",
		"nolib":    `no "module:" line`,
		"relative": "which is in none of",
	} {
		_, err := locate.ModuleByName(name, dirs)
		if !errors.Is(err, tokenerr.ErrModuleNotFound) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	if _, err := locate.ModuleByName("x", []string{t.TempDir()}); err == nil || !strings.Contains(err.Error(), "none is registered") {
		t.Errorf("empty: %v", err)
	}
}

func TestSelectionComplete(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libfake.so")
	os.WriteFile(lib, []byte("not really"), 0o644)
	other := filepath.Join(t.TempDir(), "libother.so")
	os.WriteFile(other, []byte("not really"), 0o644)
	link := filepath.Join(t.TempDir(), "link.so")
	os.Symlink(lib, link)
	dirs := []string{moduleConfDir(t, map[string]string{"mine.module": "module: " + lib + "\n"})}
	t.Setenv(ModuleEnv, "")

	s, err := Selection{URI: "pkcs11:token=t;slot-id=3;object=k;x-v=1?module-name=mine&pin-source=file:/run/pin", ModuleConfigDirs: dirs}.Complete()
	if err != nil {
		t.Fatal(err)
	}
	if s.Module != lib || s.ModuleSource != "pkcs11 URI" || s.Token.Label != "t" || !s.Token.HasSlot || s.Token.Slot != 3 ||
		s.KeyLabel != "k" || s.PIN.File != "/run/pin" || strings.Join(s.Ignored(), ",") != "x-v" {
		t.Fatalf("%+v", s)
	}
	if again, err := s.Complete(); err != nil || again.Module != s.Module {
		t.Fatalf("completing twice: %+v %v", again, err)
	}
	// The same module by a symbolic link is no contradiction.
	if _, err := (Selection{Module: link, URI: "pkcs11:token=t?module-name=mine", ModuleConfigDirs: dirs}).Complete(); err != nil {
		t.Errorf("same module by a link: %v", err)
	}
	for name, tc := range map[string]struct {
		sel  Selection
		env  string
		want string
	}{
		"module flag":      {Selection{Module: other, URI: "pkcs11:token=t?module-name=mine"}, "", "by --module but the URI's module-name=mine"},
		"module env":       {Selection{URI: "pkcs11:token=t?module-path=" + lib}, other, "by $" + ModuleEnv},
		"path and name":    {Selection{URI: "pkcs11:token=t?module-path=" + other + "&module-name=mine"}, "", "different modules"},
		"unknown name":     {Selection{URI: "pkcs11:token=t?module-name=opensc-nothing"}, "", "p11-kit has no module of that name"},
		"pin-file":         {Selection{PIN: PINSource{File: "/a"}, URI: "pkcs11:token=t?pin-source=/b"}, "", "the PIN file is given both"},
		"token label flag": {Selection{Token: tokeninfo.TokenSelector{Label: "u"}, URI: "pkcs11:token=t"}, "", "the token label is given both"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(ModuleEnv, tc.env)
			tc.sel.ModuleConfigDirs = dirs
			_, err := tc.sel.Complete()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
}

func TestChooseTokenBySlot(t *testing.T) {
	tokens := []tokeninfo.TokenInfo{{Label: "a", Serial: "1", Slot: 5, Initialized: true}, {Label: "b", Serial: "2", Slot: 9, Initialized: true}}
	got, err := tokeninfo.ChooseToken(tokens, tokeninfo.TokenSelector{Slot: 9, HasSlot: true})
	if err != nil || got.Label != "b" {
		t.Fatalf("%+v %v", got, err)
	}
	for _, sel := range []tokeninfo.TokenSelector{{Slot: 99999, HasSlot: true}, {Label: "a", Slot: 9, HasSlot: true}} {
		_, err := tokeninfo.ChooseToken(tokens, sel)
		if !errors.Is(err, tokenerr.ErrTokenNotFound) || !strings.Contains(err.Error(), "in slot") {
			t.Errorf("%v: %v", sel, err)
		}
	}
}

// TestChooseTokenAmbiguous: a selection that matches several tokens is
// refused, naming their slots and how to choose; by slot when their
// serials are the same too (two libcacard cards), else by serial as well.
func TestChooseTokenAmbiguous(t *testing.T) {
	same := []tokeninfo.TokenInfo{{Label: "a", Serial: "1", Slot: 0, Initialized: true}, {Label: "a", Serial: "1", Slot: 4, Initialized: true}}
	other := []tokeninfo.TokenInfo{{Label: "a", Serial: "1", Slot: 0, Initialized: true}, {Label: "a", Serial: "2", Slot: 4, Initialized: true}}
	for _, tc := range []struct {
		name   string
		tokens []tokeninfo.TokenInfo
		sel    tokeninfo.TokenSelector
		want   []string
		not    string
	}{
		{"same label and serial", same, tokeninfo.TokenSelector{Label: "a"}, []string{`matches "a"`, "slot 0", "slot 4", "slot-id=0"}, "--token-serial"},
		{"same serial chosen", same, tokeninfo.TokenSelector{Label: "a", Serial: "1"}, []string{"slot 0", "slot 4", "slot-id="}, "--token-serial"},
		{"serials differ", other, tokeninfo.TokenSelector{Label: "a"}, []string{"slot 0", "slot 4", "--token-serial", "slot-id="}, ""},
		{"none chosen", []tokeninfo.TokenInfo{{Label: "a", Serial: "1", Slot: 0, Initialized: true}, {Label: "b", Serial: "1", Slot: 4, Initialized: true}},
			tokeninfo.TokenSelector{}, []string{"none was chosen", "slot 0", "slot 4", "--token-label", "slot-id="}, "--token-serial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tokeninfo.ChooseToken(tc.tokens, tc.sel)
			if !errors.Is(err, tokenerr.ErrTokenAmbiguous) || errors.Is(err, tokenerr.ErrTokenNotFound) {
				t.Fatalf("%v, want tokenerr.ErrTokenAmbiguous", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v, want %q in it", err, w)
				}
			}
			if tc.not != "" && strings.Contains(err.Error(), tc.not) {
				t.Errorf("%v: %q does not choose among these", err, tc.not)
			}
		})
	}
	got, err := tokeninfo.ChooseToken(same, tokeninfo.TokenSelector{Label: "a", Slot: 4, HasSlot: true})
	if err != nil || got.Slot != 4 {
		t.Fatalf("by slot: %+v %v", got, err)
	}
}

// TestDefaultModulesProxyFirst: with nothing named, p11-kit's proxy (every
// registered module) is chosen before SoftHSM, the development module;
// SoftHSM is found when the proxy is not installed.
func TestDefaultModulesProxyFirst(t *testing.T) {
	dir := t.TempDir()
	proxy, softhsm := filepath.Join(dir, "p11-kit-proxy.so"), filepath.Join(dir, "libsofthsm2.so")
	t.Setenv(ModuleEnv, "")
	os.WriteFile(softhsm, []byte("x"), 0o644)
	candidates := []string{proxy, softhsm}
	if m, err := locate.ResolveFrom("", "flag", candidates); err != nil || m.Path != softhsm || m.Source != "default location" {
		t.Fatalf("without the proxy: %+v %v", m, err)
	}
	os.WriteFile(proxy, []byte("x"), 0o644)
	if m, err := locate.ResolveFrom("", "flag", candidates); err != nil || m.Path != proxy {
		t.Fatalf("with the proxy: %+v %v", m, err)
	}
	if !slices.Equal(locate.DefaultModules[:len(locate.ProxyModules)], locate.ProxyModules) || !slices.Equal(locate.DefaultModules[len(locate.ProxyModules):], locate.SoftHSMModules) {
		t.Fatalf("locate.DefaultModules = %v", locate.DefaultModules)
	}
}

// ObjectURI, what keys --json prints, parses back to the same token, key
// and type, whatever the labels hold (RFC 7512 percent-encoding).
func TestObjectURIRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		tok        tokeninfo.TokenInfo
		typ, label string
		id         []byte
	}{
		{tokeninfo.TokenInfo{Label: "signagent-dev", Serial: "ec15a64fcd55b56f"}, "private", "signagent-dev", []byte{1}},
		{tokeninfo.TokenInfo{Label: "Рутокен ЭЦП 3.0", Serial: "3a 5f"}, "cert", "key;1?a=b&c/%", []byte{0xa0, 0xff, 0}},
		{tokeninfo.TokenInfo{Label: "t", Serial: "1"}, "public", "", []byte{2}},
	} {
		s := uri.Object(tc.tok.Label, tc.tok.Serial, tc.typ, tc.label, tc.id)
		u, err := uri.Parse(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if u.Token != tc.tok.Label || u.Serial != tc.tok.Serial || u.Object != tc.label || !bytes.Equal(u.ID, tc.id) || u.Type != tc.typ {
			t.Fatalf("%s parsed as %+v", s, u)
		}
		if strings.ContainsAny(strings.TrimPrefix(s, "pkcs11:"), " ?/%\u0420") && !strings.Contains(s, "%") {
			t.Fatalf("%s is not percent-encoded", s)
		}
	}
}
