package refusedpin

import "testing"

func TestRememberedByTokenAndPIN(t *testing.T) {
	m := New()
	if m.Refused("a", "1234") {
		t.Fatal("a new memory says a PIN was refused")
	}
	m.Remember("a", "1234", true)
	if !m.Refused("a", "1234") || m.Refused("a", "4321") || m.Refused("b", "1234") {
		t.Fatal("a refusal is remembered for that token and that PIN alone")
	}
	m.Remember("a", "4321", false)
	if m.Refused("a", "1234") {
		t.Fatal("a login that worked does not forget the token's refusal")
	}
	if h := m.refused; len(h) != 0 {
		t.Fatalf("left %d entries", len(h))
	}
	if New().hash("1234") == m.hash("1234") {
		t.Fatal("two memories share a salt")
	}
}
