package agentapi

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// msTime is the one shape of a time in the agent's JSON.
var msTime = regexp.MustCompile(`^"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"$`)

func TestTimeMarshal(t *testing.T) {
	moscow := time.FixedZone("MSK", 3*3600)
	for _, tc := range []struct {
		in   time.Time
		want string
	}{
		{time.Date(2026, 11, 28, 20, 22, 47, 123456789, moscow), `"2026-11-28T17:22:47.123Z"`},
		{time.Date(2026, 11, 28, 17, 22, 47, 0, time.UTC), `"2026-11-28T17:22:47.000Z"`},
		{time.Date(2026, 11, 28, 17, 22, 47, 999999999, time.UTC), `"2026-11-28T17:22:47.999Z"`}, // truncated, not rounded into the next second
		{time.Time{}, `"0001-01-01T00:00:00.000Z"`},
	} {
		b, err := json.Marshal(At(tc.in))
		if err != nil || string(b) != tc.want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tc.in, b, err, tc.want)
		}
		if !msTime.Match(b) {
			t.Errorf("%s is not RFC 3339 UTC with milliseconds", b)
		}
	}
	if _, err := json.Marshal(At(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))); err == nil {
		t.Error("year 10000 marshalled")
	}
}

// TestTimeUnmarshal: a reader takes any RFC 3339 precision, as an agent
// of an earlier release wrote it (Go's default: nanoseconds, the local
// offset), and refuses what is not RFC 3339.
func TestTimeUnmarshal(t *testing.T) {
	want := time.Date(2026, 11, 28, 17, 22, 47, 0, time.UTC)
	for in, w := range map[string]time.Time{
		`"2026-11-28T17:22:47Z"`:                want,
		`"2026-11-28T17:22:47.123Z"`:            want.Add(123 * time.Millisecond),
		`"2026-11-28T20:22:47.123456789+03:00"`: want.Add(123456789 * time.Nanosecond),
		`"2026-11-28T17:22:47.5Z"`:              want.Add(500 * time.Millisecond),
	} {
		var got Time
		if err := json.Unmarshal([]byte(in), &got); err != nil || !got.Equal(w) {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", in, got, err, w)
		}
	}
	for _, in := range []string{`"2026-11-28 17:22:47"`, `"yesterday"`, `1764350567`, `""`} {
		var got Time
		if err := json.Unmarshal([]byte(in), &got); err == nil {
			t.Errorf("Unmarshal(%s) accepted %v", in, got)
		}
	}
	var s SessionResponse
	if err := json.Unmarshal([]byte(`{"sid":"x","obtainedAt":null,"cached":true}`), &s); err != nil || !s.ObtainedAt.IsZero() {
		t.Errorf("null: %v, %v", s.ObtainedAt, err)
	}
}

// TestNoBareTimeInAPI: no field of any type of the agent's API is a
// time.Time (which writes nanoseconds and the local offset): each is an
// agentapi.Time. Read from the package's source, so a new type cannot slip by.
func TestNoBareTimeInAPI(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fields := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "time.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			field, ok := n.(*ast.Field)
			if !ok {
				return true
			}
			fields++
			ast.Inspect(field.Type, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" && sel.Sel.Name == "Time" {
						t.Errorf("%s: a time.Time field: make it an agentapi.Time", fset.Position(field.Pos()))
					}
				}
				return true
			})
			return true
		})
	}
	if fields < 20 {
		t.Fatalf("read %d fields from %v: not the package's source", fields, files)
	}
}
