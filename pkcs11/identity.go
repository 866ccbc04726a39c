package pkcs11

import (
	"context"
	"crypto"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	p11 "github.com/miekg/pkcs11"

	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/pkcs11/object"
	"github.com/signagent/signagent/pkcs11/tokenerr"
	"github.com/signagent/signagent/pkcs11/tokeninfo"
)

// A card swapped under a running agent must not get the agent's PIN, nor
// sign for it. A selection by label (or "the only token") matches any card
// of the batch, so an owner that opens the key again (the agent's
// reconnect) says which token it opened before (Selection.Expect): the
// token must then have the same serial and label, checked before C_Login,
// and the key the same public half: checked before C_Login where the
// token shows its public-key objects without a login (checkPublic), and
// always after the login, before any signature (checkKey). Cards of one
// batch may share their serial as well (every libcacard card has the
// same): the public half tells them apart. gpg does the same with a
// card's serial number.

// Identity is what a key was opened on: its token's label and serial and
// the key's public half.
type Identity struct {
	Label       string
	Serial      string
	Public      crypto.PublicKey
	PublicShown bool // the token showed Public without a login when the key was opened
}

// ErrOtherToken: the token in the reader is not the one the key was
// opened on (Selection.Expect). No PIN was sent to it, and nothing is
// signed with its key.
var ErrOtherToken = errdefs.New(errdefs.ErrTokenNotReady, "a different token is in the reader")

// otherToken is ErrOtherToken with its one line, which names both tokens.
type otherToken struct{ line string }

func (e *otherToken) Error() string { return e.line }
func (e *otherToken) Unwrap() error { return ErrOtherToken }

// Identity returns the token and key k was opened on, for a later
// Selection.Expect.
func (k *Key) Identity() Identity {
	return Identity{Label: k.tok.info.Label, Serial: k.tok.info.Serial, Public: k.pub, PublicShown: k.pubShown}
}

// pickToken chooses the token to log in to among tokens: the one the
// selection names, and with Expect set only the token the key was opened
// on. A token the selection alone would have chosen in its place is
// ErrOtherToken, before any PIN is sent.
func (t *Token) pickToken(tokens []tokeninfo.TokenInfo) (tokeninfo.TokenInfo, error) {
	want := t.sel.Expect
	if want == nil {
		return tokeninfo.ChooseToken(tokens, t.sel.Token)
	}
	ours := t.sel.Token
	ours.Label, ours.Serial = want.Label, want.Serial
	tok, err := tokeninfo.ChooseToken(tokens, ours)
	if !errors.Is(err, tokenerr.ErrTokenNotFound) {
		return tok, err
	}
	other, oerr := tokeninfo.ChooseToken(tokens, t.sel.Token)
	if oerr != nil {
		return tokeninfo.TokenInfo{}, err // nothing in its place: the token is out
	}
	return tokeninfo.TokenInfo{}, &otherToken{fmt.Sprintf("a different token, serial %s, is in the reader; this agent's is serial %s (label %q); no PIN was sent to it: put this agent's token back, or name the other by its serial (serial= in the key's URI, or --token-serial) and reload",
		orNone(other.Serial), orNone(want.Serial), want.Label)}
}

// publicHalves returns the public halves of the public-key objects the
// selection names that the token shows without a login.
func (t *Token) publicHalves(ctx context.Context, sh p11.SessionHandle) ([]crypto.PublicKey, error) {
	return call(ctx, t.mod, func(b Backend) ([]crypto.PublicKey, error) {
		hs, err := object.FindObjects(b, sh, object.Template(p11.CKO_PUBLIC_KEY, t.sel.KeyLabel, t.sel.KeyID))
		var out []crypto.PublicKey
		for _, h := range hs {
			if _, _, pub := object.PublicHalf(b, sh, h); pub != nil {
				out = append(out, pub)
			}
		}
		return out, err
	}, nil)
}

// checkPublic refuses, with Expect set, a token whose public-key objects
// for the key (pubs, read without a login; perr the error reading them)
// show only other public halves, or none where the expected token showed
// its key's, before any PIN is sent: two cards of one batch share a label
// and may share a serial, and the other card would count the PIN as a
// wrong try. A token that never showed it is left to checkKey.
func (t *Token) checkPublic(pubs []crypto.PublicKey, perr error) error {
	want := t.sel.Expect
	if want == nil || want.Public == nil || (!want.PublicShown && (perr != nil || len(pubs) == 0)) {
		return nil // nothing to tell by without a login: checkKey will
	}
	if perr != nil {
		return fmt.Errorf("could not read the token's public keys before logging in, so no PIN was sent to it: %w", perr)
	}
	what := "shows no public half of this agent's key without a login, as this agent's token did"
	if len(pubs) > 0 {
		if containsKey(pubs, want.Public) {
			return nil
		}
		what = "not this agent's key"
	}
	return &otherToken{fmt.Sprintf("a different token is in the reader: it has this agent's serial %s and label %q, but %s; no PIN was sent to it: put this agent's token back",
		orNone(t.info.Serial), t.info.Label, what)}
}

func containsKey(pubs []crypto.PublicKey, pub crypto.PublicKey) bool {
	return slices.ContainsFunc(pubs, func(p crypto.PublicKey) bool { return samePublicKey(pub, p) })
}

// checkKey refuses, with Expect set, a key whose public half is not the
// one the key was opened with: a token of the same serial and label (two
// cards of one batch) holding another key. It runs after the login and
// before anything is signed.
func (t *Token) checkKey(k *Key) error {
	want := t.sel.Expect
	if want == nil || samePublicKey(want.Public, k.pub) {
		return nil
	}
	return &otherToken{fmt.Sprintf("a different token is in the reader: it has this agent's serial %s and label %q, but its key %q (id %s) is not this agent's key; nothing was signed with it: put this agent's token back",
		orNone(t.info.Serial), t.info.Label, k.label, hex.EncodeToString(k.id))}
}

func orNone(serial string) string {
	if serial == "" {
		return "(none)"
	}
	return serial
}
