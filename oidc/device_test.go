package oidc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/internal/httpx"
)

func deviceAnswer(f *fakeIDP, edit func(map[string]any)) map[string]any {
	m := map[string]any{"device_code": "dc", "user_code": "ABCDEFGH", "verification_uri": f.url + "/device",
		"verification_uri_complete": f.url + "/device?user-code=ABCDEFGH", "expires_in": 300, "interval": 5}
	if edit != nil {
		edit(m)
	}
	return m
}

// TestDeviceAddressesChecked: the addresses the provider asks the user to
// open are shown only when they are http(s) URLs without control or
// format characters: a terminal escape, a javascript: URL or text that is
// no URL ends the sign-in with one line that does not echo the escape.
func TestDeviceAddressesChecked(t *testing.T) {
	t.Parallel()
	f := newFakeIDP(t)
	c, err := New(Config{AuthURL: f.url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging})
	if err != nil {
		t.Fatal(err)
	}
	f.setDevice(deviceAnswer(f, nil))
	d, err := c.StartDevice(t.Context())
	if err != nil || d.VerificationURI != f.url+"/device" || d.VerificationURIComplete != f.url+"/device?user-code=ABCDEFGH" {
		t.Fatalf("%+v %v", d, err)
	}
	for name, edit := range map[string]func(map[string]any){
		"escape in uri":        func(m map[string]any) { m["verification_uri"] = f.url + "/device\x1b]0;owned\x07\x1b[2J" },
		"escape in complete":   func(m map[string]any) { m["verification_uri_complete"] = "\x1b[31m" + f.url },
		"C1 control":           func(m map[string]any) { m["verification_uri"] = f.url + "/\u009b2J" },
		"bidi override":        func(m map[string]any) { m["verification_uri"] = f.url + "/\u202egnp.exe" },
		"javascript":           func(m map[string]any) { m["verification_uri"] = "javascript:alert(1)" },
		"not a URL":            func(m map[string]any) { m["verification_uri"] = "go to the office and ask" },
		"file":                 func(m map[string]any) { m["verification_uri_complete"] = "file:///etc/passwd" },
		"plain http elsewhere": func(m map[string]any) { m["verification_uri"] = "http://phish.example/device" },
		"user info":            func(m map[string]any) { m["verification_uri"] = "https://identity.example@phish.example/" },
		"no host":              func(m map[string]any) { m["verification_uri"] = "https:///device" },
	} {
		t.Run(name, func(t *testing.T) {
			f.setDevice(deviceAnswer(f, edit))
			_, err := c.StartDevice(t.Context())
			var te *httpx.TransportError
			if !errors.As(err, &te) || !strings.Contains(err.Error(), "verification address") ||
				strings.ContainsAny(err.Error(), "\x1b\x07\u009b\u202e\n") {
				t.Fatalf("err = %q", err)
			}
		})
	}
}

// TestDeviceIntervalClamped: an interval of 10^10 seconds (which
// overflowed into no wait at all: 68 polls in 3 s) is clamped, so a code
// that expires in 2 s is never polled; zero or a negative interval is the
// default 5 s.
func TestDeviceIntervalClamped(t *testing.T) {
	t.Parallel()
	f := newFakeIDP(t)
	c, err := New(Config{AuthURL: f.url, ClientID: testClient, ClientSecret: testSecret, Space: SpaceStaging})
	if err != nil {
		t.Fatal(err)
	}
	f.setDevice(deviceAnswer(f, func(m map[string]any) { m["interval"] = int64(1e10); m["expires_in"] = 2 }))
	d, err := c.StartDevice(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d.Interval != MaxDeviceInterval {
		t.Fatalf("interval %v", d.Interval)
	}
	_, err = c.PollDevice(t.Context(), d)
	if !errors.Is(err, ErrExpired) {
		t.Fatalf("err = %v", err)
	}
	if n := f.devicePolls.Load(); n != 0 {
		t.Fatalf("%d polls of a code that expired before the first interval", n)
	}
	for _, v := range []int64{0, -3} {
		f.setDevice(deviceAnswer(f, func(m map[string]any) { m["interval"] = v }))
		if d, err := c.StartDevice(context.Background()); err != nil || d.Interval != DefaultDeviceInterval {
			t.Fatalf("interval %d: %v %v", v, d, err)
		}
	}
	if got := deviceInterval(7); got != 7*time.Second {
		t.Fatalf("7: %v", got)
	}
}
