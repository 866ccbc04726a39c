package agentclient

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// SocketEnv names the running agent's Unix socket, as SSH_AUTH_SOCK names
// ssh-agent's: `signagent serve --print-env` prints the line that sets it,
// and the per-user socket unit sets it in the user's session.
const SocketEnv = "SIGNAGENT_AGENT_SOCK"

// ErrNoAgent is FromEnv's error when SIGNAGENT_AGENT_SOCK is not set: no
// agent is named, so the program does the work itself (or refuses).
var ErrNoAgent = errors.New(SocketEnv + " is not set: no agent is named")

// ErrNoSocket is the error when the named socket is not there or is not a
// socket: the agent is not running (or the name is wrong).
var ErrNoSocket = errors.New("no agent listens there")

// FromEnv is the client of the agent SIGNAGENT_AGENT_SOCK names, the way
// ssh clients find ssh-agent: ErrNoAgent when it is not set, ErrNoSocket
// when it names nothing or what is not a socket.
//
//	c, err := agentclient.FromEnv()
//	if errors.Is(err, agentclient.ErrNoAgent) { /* do it here, or refuse */ }
func FromEnv() (*Client, error) {
	path := os.Getenv(SocketEnv)
	if path == "" {
		return nil, ErrNoAgent
	}
	c, err := FromSocket(path)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", SocketEnv, path, err)
	}
	return c, nil
}

// FromSocket is NewUnix for a path checked first: ErrNoSocket when nothing
// is there or it is not a socket (the error names which).
func FromSocket(path string) (*Client, error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, noSocket("nothing is there (is signagent serve running? signagent serve --print-env prints the line to set)")
	case err != nil:
		return nil, noSocket(err.Error())
	case st.Mode()&fs.ModeSocket == 0:
		return nil, noSocket("it is not a socket")
	}
	return NewUnix(path), nil
}

// noSocket is an ErrNoSocket saying why in its own words.
type noSocket string

func (e noSocket) Error() string        { return string(e) }
func (e noSocket) Is(target error) bool { return target == ErrNoSocket }
