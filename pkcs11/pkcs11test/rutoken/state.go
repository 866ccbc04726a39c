package rutoken

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/signagent/signagent/safefile"
)

// The card's state file holds its PINs and private keys in clear, as a
// card's memory does: it is written whole (a temporary file renamed over
// it) with mode 0600 and read only when no one else can read it.

// LoadState reads the state file at path; a missing file is a blank card
// (no MF, as after an erase) with no serial.
func LoadState(path string) (State, error) {
	var st State
	b, err := safefile.ReadSecret(path, 1<<20, 0o077)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("the card's state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("the card's state %s: %w", path, err)
	}
	return st, nil
}

// SaveState writes st to path (0600).
func SaveState(path string, st *State) error {
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return err
	}
	return safefile.Write(path, b, 0o600)
}
