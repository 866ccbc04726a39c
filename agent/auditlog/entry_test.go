package auditlog

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestWriterLines: one JSON line per entry, with the fields every line
// has and only those of the others that are set; a nil Writer writes
// nothing.
func TestWriterLines(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	cached := false
	w.Write(Entry{Caller: "uid:1000", Operation: "POST /v1/sessions", Outcome: "ok", Latency: 1500 * time.Microsecond,
		Kind: "phone", Credential: "916*****67", Cached: &cached, Source: "login", RequestID: "r1"})
	w.Write(Entry{Caller: "tcp", Operation: "service", Outcome: "service_error", Call: "GET /GetMyOrganizations",
		Status: 502, Retried: true, Scheme: "oidc", Identity: "crm"})
	var nilWriter *Writer
	nilWriter.Write(Entry{Operation: "nothing"})

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	want := []map[string]any{
		{"caller": "uid:1000", "operation": "POST /v1/sessions", "outcome": "ok", "latencyMs": 1.5, "credentialKind": "phone",
			"credential": "916*****67", "cached": false, "from": "login", "requestId": "r1"},
		{"caller": "tcp", "operation": "service", "outcome": "service_error", "latencyMs": 0.0, "call": "GET /GetMyOrganizations",
			"serviceStatus": 502.0, "retried": true, "scheme": "oidc", "identity": "crm"},
	}
	for i, l := range lines {
		var got map[string]any
		if err := json.Unmarshal(l, &got); err != nil {
			t.Fatal(err)
		}
		if _, ok := got["time"]; !ok {
			t.Errorf("line %d has no time: %s", i, l)
		}
		delete(got, "time")
		if len(got) != len(want[i]) {
			t.Errorf("line %d: %s, want the fields %v", i, l, want[i])
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, got[k], v)
			}
		}
	}
}
