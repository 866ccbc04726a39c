package agentclient

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
)

// The client sends an agent auth.sids, logins, passwords' owners and
// business bodies, and takes its signatures on trust: so, as ssh-agent's
// and gpg-agent's clients rely on a socket only their user can reach, it
// talks over a Unix socket only to an agent of a user it trusts, checked
// right after connecting and before anything is sent.

// ServiceUser is the user the packaged system agent runs as
// (deploy/signagent.service, packaging/sysusers.conf): its agent is
// trusted, as are this user's and root's.
const ServiceUser = "signagent"

// ErrUntrustedPeer matches a *PeerError: the process serving the agent
// socket runs as a user this one does not trust, and nothing was sent.
var ErrUntrustedPeer = errors.New("the agent socket is served by another user")

// PeerError is an agent socket served by a process of another user than
// this one, root or ServiceUser.
type PeerError struct {
	Socket string
	UID    int
	// User is UID's name, "" when it has none.
	User string
	// Self is this process's uid.
	Self int
}

// Error says which process serves the socket and why it is not trusted.
func (e *PeerError) Error() string {
	who := "uid " + strconv.Itoa(e.UID)
	if e.User != "" {
		who += " (" + e.User + ")"
	}
	return fmt.Sprintf("refusing the agent socket %s: %s %s, not this user (uid %d), root or %s; nothing was sent to it",
		e.Socket, peerHow, who, e.Self, ServiceUser)
}

// Is makes a PeerError match ErrUntrustedPeer.
func (e *PeerError) Is(target error) bool { return target == ErrUntrustedPeer }

// checkPeer is the decision: nil when uid, the peer's, is one of
// trusted, else a *PeerError naming socket and the uid's user.
func checkPeer(socket string, uid int, trusted []int) error {
	if slices.Contains(trusted, uid) {
		return nil
	}
	e := &PeerError{Socket: socket, UID: uid, Self: os.Getuid()}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		e.User = u.Username
	}
	return e
}

// trustedUIDs are the users whose agent this process talks to: itself
// (its real and effective uid), root (systemd holds the system agent's
// socket, so its peer is root) and ServiceUser, when this system has it.
func trustedUIDs() []int {
	ids := []int{os.Getuid(), os.Geteuid(), 0}
	if u, err := user.Lookup(ServiceUser); err == nil {
		if id, err := strconv.Atoi(u.Uid); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// verifyPeer checks who serves c, a connection to socket; an error when
// it is not one of trusted or cannot be told (where the system can tell).
func verifyPeer(c net.Conn, socket string, trusted []int) error {
	uid, known, err := peerUID(c, socket)
	if err != nil {
		return fmt.Errorf("could not tell who serves the agent socket %s, so nothing was sent to it: %w", socket, err)
	}
	if !known {
		return nil
	}
	return checkPeer(socket, uid, trusted)
}
