//go:build unix && !linux

package agentclient

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// peerHow says how peerUID knows the uid, for PeerError.
const peerHow = "its file belongs to"

// peerUID is, where SO_PEERCRED is not there, the owner of the socket's
// file: who made it, which is the agent that listens on it unless that
// user let others replace it.
func peerUID(_ net.Conn, socket string) (int, bool, error) {
	st, err := os.Stat(socket)
	if err != nil {
		return 0, false, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false, errors.New("no owner in its file's status")
	}
	return int(sys.Uid), true, nil
}
