package gost

import (
	"encoding/hex"
	"strings"
	"testing"
)

// reverse turns the standard's printed notation into output byte order.
func reverse(s string) string {
	b, _ := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return hex.EncodeToString(b)
}

// The examples of GOST R 34.11-2012 (RFC 6986 section 10), as printed
// there: most significant byte first, the reverse of the output order.
func TestStreebogKnownAnswers(t *testing.T) {
	m1 := []byte("012345678901234567890123456789012345678901234567890123456789012")
	m2, _ := hex.DecodeString(reverse("fbe2e5f0eee3c820fbeafaebef20fffbf0e1e0f0f520e0ed20e8ece0ebe5f0f2f120fff0eeec20f120faf2fee5e2202ce8f6f3ede220e8e6eee1e8f0f2d1202ce8f0f2e5e220e5d1"))
	for _, c := range []struct {
		name string
		msg  []byte
		size int
		want string
	}{
		{"M1 512", m1, 64, reverse("486f64c1917879417fef082b3381a4e211c324f074654c38823a7b76f830ad00fa1fbae42b1285c0352f227524bc9ab16254288dd6863dccd5b9f54a1ad0541b")},
		{"M1 256", m1, 32, reverse("00557be5e584fd52a449b16b0251d05d27f94ab76cbaa6da890b59d8ef1e159d")},
		{"M2 512", m2, 64, reverse("28fbc9bada033b1460642bdcddb90c3fb3e56c497ccd0f62b8a2ad4935e85f037613966de4ee00531ae60f3b5a47f8dae06915d5f2f194996fcabf2622e6881e")},
		{"M2 256", m2, 32, reverse("508f7e553c06501d749a66fc28c6cac0b005746d97537fa85d9e40904efed29d")},
	} {
		var got []byte
		if c.size == 32 {
			got = Sum256(c.msg)
		} else {
			got = Sum512(c.msg)
		}
		if hex.EncodeToString(got) != c.want {
			t.Errorf("%s: got %x, want %s", c.name, got, c.want)
		}
	}
	// The byte order gost.md records from OpenSSL and GnuTLS for M1.
	if got := hex.EncodeToString(Sum256(m1)); got != "9d151eefd8590b89daa6ba6cb74af9275dd051026bb149a452fd84e5e57b5500" {
		t.Errorf("M1 256 in output order: %s", got)
	}
}

// Writing in pieces gives what writing at once gives, at every split of
// messages around the block size.
func TestStreebogStreaming(t *testing.T) {
	msg := make([]byte, 200)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	for n := 0; n <= len(msg); n += 13 {
		for _, split := range []int{0, 1, 63, 64, 65, 128} {
			if split > n {
				continue
			}
			h := New512()
			h.Write(msg[:split])
			h.Write(msg[split:n])
			if got, want := hex.EncodeToString(h.Sum(nil)), hex.EncodeToString(Sum512(msg[:n])); got != want {
				t.Fatalf("len %d split %d: %s != %s", n, split, got, want)
			}
		}
	}
	h := New256()
	h.Write([]byte("abc"))
	first := h.Sum(nil)
	if again := h.Sum(nil); hex.EncodeToString(first) != hex.EncodeToString(again) {
		t.Fatal("Sum changed the state")
	}
}
