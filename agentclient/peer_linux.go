package agentclient

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// peerHow says how peerUID knows the uid, for PeerError.
const peerHow = "the process listening on it runs as"

// peerUID is the uid of the process that listens at the other end of c,
// as the kernel recorded it when that process listened (SO_PEERCRED): a
// socket that systemd made and passed to the agent reports root.
func peerUID(c net.Conn, _ string) (int, bool, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, false, errors.New("not a Unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, false, err
	}
	if credErr != nil {
		return 0, false, credErr
	}
	return int(cred.Uid), true, nil
}
