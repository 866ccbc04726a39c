package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestKind(t *testing.T) {
	bad := New(ErrInvalidInput, "bad credential")
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"nil", nil, nil},
		{"no kind", errors.New("boom"), nil},
		{"a kind itself", ErrRefused, ErrRefused},
		{"a sentinel", bad, ErrInvalidInput},
		{"wrapped sentinel", fmt.Errorf("sign: %w", bad), ErrInvalidInput},
		{"first in order wins", errors.Join(New(ErrNotConfigured, "x"), New(ErrTokenNotReady, "y")), ErrTokenNotReady},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Kind(c.err); got != c.want {
				t.Fatalf("Kind = %v, want %v", got, c.want)
			}
		})
	}
	if !errors.Is(bad, bad) || errors.Is(bad, ErrRefused) {
		t.Fatal("a sentinel matches itself and its kind only")
	}
	if bad.Error() != "bad credential" {
		t.Fatalf("text %q", bad.Error())
	}
}

// Every kind is in Kinds once, so that Kind can find it.
func TestKindsComplete(t *testing.T) {
	all := []error{ErrInvalidInput, ErrNotConfigured, ErrRefused, ErrFailing, ErrUnreachable, ErrTimeout,
		ErrSignIn, ErrBackoff, ErrTryAgain, ErrTokenNotReady, ErrStoreUnavailable, ErrStoreFormatNewer, ErrForbidden}
	if len(all) != len(Kinds) {
		t.Fatalf("%d kinds, Kinds lists %d", len(all), len(Kinds))
	}
	for _, k := range all {
		if Kind(k) != k {
			t.Errorf("Kind(%v) = %v", k, Kind(k))
		}
	}
}

// Mark adds a sentinel (and its kind) to an error without its text.
func TestMark(t *testing.T) {
	key := New(ErrInvalidInput, "invalid API key")
	missing := errors.New("not given")
	err := Mark(fmt.Errorf("%w: no API key: give --api-key-file", missing), key)
	if err.Error() != "not given: no API key: give --api-key-file" {
		t.Fatalf("text %q", err.Error())
	}
	if !errors.Is(err, key) || !errors.Is(err, missing) || Kind(err) != ErrInvalidInput {
		t.Fatal("a marked error is its sentinel, its kind and what it wraps")
	}
	if Mark(nil, key) != nil {
		t.Fatal("Mark(nil) is nil")
	}
}
