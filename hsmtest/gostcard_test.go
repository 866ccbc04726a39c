package hsmtest_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/signagent/signagent/hsmtest"
)

func TestGOSTCardUp(t *testing.T) {
	card := hsmtest.NewGOSTCard(t, hsmtest.GOSTCardOptions{LogAPDUs: true})
	cmd := exec.Command("pkcs11-tool", "--module", card.Module, "-L", "-M", "-O")
	cmd.Env = append(os.Environ(), card.Env...)
	out, err := cmd.CombinedOutput()
	t.Logf("%s %v", out, err)
	t.Log(card.BridgeLog(t))
}
