// Package access decides who may call the agent: a Unix-socket caller by
// the credentials the kernel reports for it (SO_PEERCRED) against the
// allowed uids and gids, a TCP caller by its bearer token.
package access

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/signagent/signagent/agent/listen"
	"github.com/signagent/signagent/agentapi"
)

// Authenticator decides whether a request's caller may use the API. It
// returns the caller's name for the audit log, and a non-zero status with
// an error body when the caller is refused.
type Authenticator interface {
	Authenticate(r *http.Request) (caller string, status int, err agentapi.Error)
}

// PeerCred is the identity of the process at the other end of a Unix
// socket, as the kernel reports it (SO_PEERCRED).
type PeerCred struct {
	UID, GID, PID int
}

type ctxKey struct{}

var peerKey ctxKey

// ConnContext records the peer credentials of a Unix-socket connection in
// its context; use it as http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := listen.Underlying(c).(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return ctx
	}
	return context.WithValue(ctx, peerKey, PeerCred{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)})
}

// Peer returns the credentials ConnContext recorded for the request's
// connection: ok is false for a caller over TCP.
func Peer(r *http.Request) (cred PeerCred, ok bool) {
	cred, ok = r.Context().Value(peerKey).(PeerCred)
	return cred, ok
}

// PeerAuth admits Unix-socket callers whose uid or primary gid is listed.
// With both lists empty, the socket's file mode alone decides who may
// connect.
type PeerAuth struct {
	UIDs, GIDs atomic.Pointer[[]int]
}

// NewPeerAuth returns a PeerAuth with the given allow-lists.
func NewPeerAuth(uids, gids []int) *PeerAuth {
	p := &PeerAuth{}
	p.Set(uids, gids)
	return p
}

// Set replaces the allow-lists (configuration reload).
func (p *PeerAuth) Set(uids, gids []int) {
	p.UIDs.Store(&uids)
	p.GIDs.Store(&gids)
}

// Authenticate implements Authenticator.
func (p *PeerAuth) Authenticate(r *http.Request) (string, int, agentapi.Error) {
	cred, ok := Peer(r)
	if !ok {
		return "unix:unknown", http.StatusForbidden, agentapi.Error{Code: agentapi.CodeForbidden, Message: "the caller's credentials could not be read"}
	}
	name := fmt.Sprintf("uid=%d gid=%d pid=%d", cred.UID, cred.GID, cred.PID)
	uids, gids := *p.UIDs.Load(), *p.GIDs.Load()
	if len(uids) == 0 && len(gids) == 0 {
		return name, 0, agentapi.Error{}
	}
	if slices.Contains(uids, cred.UID) || slices.Contains(gids, cred.GID) {
		return name, 0, agentapi.Error{}
	}
	return name, http.StatusForbidden, agentapi.Error{Code: agentapi.CodeForbidden, Message: fmt.Sprintf("uid %d (gid %d) is not allowed to use this agent", cred.UID, cred.GID)}
}

// BearerAuth admits TCP callers that send Authorization: Bearer <token>.
type BearerAuth struct {
	sum atomic.Pointer[[32]byte]
}

// NewBearerAuth returns a BearerAuth for token.
func NewBearerAuth(token string) *BearerAuth {
	b := &BearerAuth{}
	b.Set(token)
	return b
}

// Set replaces the token (configuration reload).
func (b *BearerAuth) Set(token string) {
	sum := sha256.Sum256([]byte(token))
	b.sum.Store(&sum)
}

// Authenticate implements Authenticator. The comparison takes the same time
// whatever the token: both sides are hashed first, then compared in
// constant time.
func (b *BearerAuth) Authenticate(r *http.Request) (string, int, agentapi.Error) {
	caller := "tcp:" + r.RemoteAddr
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		caller += " cn=" + r.TLS.PeerCertificates[0].Subject.CommonName
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
		return caller, http.StatusUnauthorized, agentapi.Error{Code: agentapi.CodeUnauthorized, Message: "send Authorization: Bearer <token> (the token is in the agent's bearer token file)"}
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	want := b.sum.Load()
	if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
		return caller, http.StatusUnauthorized, agentapi.Error{Code: agentapi.CodeUnauthorized, Message: "the bearer token is not the agent's"}
	}
	return caller, 0, agentapi.Error{}
}
