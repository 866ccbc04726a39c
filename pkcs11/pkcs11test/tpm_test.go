package pkcs11test

import (
	"errors"
	"net"
	"testing"
)

// TestSWTPMPortTaken: swtpm started on a port another listens on says so
// (and NewTPM tries two others), rather than the other's server being
// taken for the TPM.
func TestSWTPMPortTaken(t *testing.T) {
	for _, taken := range []int{0, 1} { // its command port, then its control port
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port - taken
		if err := swtpmOn(t, t.TempDir(), port); !errors.Is(err, errPortTaken) {
			t.Fatalf("swtpm with port %d of %d, %d taken: %v, want the port taken", port+taken, port, port+1, err)
		}
	}
}
