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
		ErrSignIn, ErrTryAgain, ErrTokenNotReady, ErrStoreUnavailable, ErrForbidden}
	if len(all) != len(Kinds) {
		t.Fatalf("%d kinds, Kinds lists %d", len(all), len(Kinds))
	}
	for _, k := range all {
		if Kind(k) != k {
			t.Errorf("Kind(%v) = %v", k, Kind(k))
		}
	}
}
