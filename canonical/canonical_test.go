package canonical

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParsePhone(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"9161234567", "9161234567", true},
		{"+7 (916) 123-45-67", "9161234567", true},
		{"8 916 123 45 67", "9161234567", true},
		{"79161234567", "9161234567", true},
		{"916123456", "", false},   // 9 digits
		{"91612345678", "", false}, // 11 digits not starting with 7/8
		{"916123456a", "", false},  // letter
		{"+8 916 123 45 67", "", false},
		{"+79161234567890", "", false},
		{"", "", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c, err := ParsePhone(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("ParsePhone(%q) err=%v, want ok=%v", tc.in, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidCredential) {
				t.Fatalf("error %v does not wrap ErrInvalidCredential", err)
			}
			if c.Value != tc.want {
				t.Fatalf("got %q want %q", c.Value, tc.want)
			}
		})
	}
}

func TestParseSNILS(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		legacy   bool
		ok       bool
		checksum bool
	}{
		{"112-233-445 95", "11223344595", false, true, false},
		{"11223344595", "11223344595", false, true, false},
		{"11223344594", "", false, false, true},
		{"40934200000", "", false, false, true},           // the published example fails the rule
		{"40934200000", "40934200000", true, true, false}, // legacy override
		{"1122334459", "", false, false, false},           // 10 digits
		{"1122334459a", "", false, false, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c, err := ParseSNILS(tc.in, Options{AllowLegacySNILS: tc.legacy})
			if tc.ok != (err == nil) {
				t.Fatalf("err=%v want ok=%v", err, tc.ok)
			}
			if errors.Is(err, ErrSNILSChecksum) != tc.checksum {
				t.Fatalf("checksum error=%v, want %v", err, tc.checksum)
			}
			if c.Value != tc.want {
				t.Fatalf("got %q want %q", c.Value, tc.want)
			}
		})
	}
}

func TestSNILSCheckRule(t *testing.T) {
	for _, tc := range []struct{ body, want, why string }{
		{"112233445", "95", "sum under 100 is the check number"},
		{"000000000", "00", "sum 0"},
		{"551100002", "00", "sum exactly 100 gives 00"},
		{"551100100", "00", "sum exactly 101 gives 00"},
		{"999999999", "01", "sum 405 is taken modulo 101"},
	} {
		if got := SNILSCheck(tc.body); got != tc.want {
			t.Errorf("SNILSCheck(%s)=%s want %s (%s)", tc.body, got, tc.want, tc.why)
		}
	}
}

func TestParseThumbprint(t *testing.T) {
	good := "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{good, true},
		{strings.ToUpper(good), true},
		{"A1:B2:C3:D4:E5:F6:07:18:29:3A:4B:5C:6D:7E:8F:90:12:34:56:78", true},
		{"a1 b2 c3 d4 e5 f6 07 18 29 3a 4b 5c 6d 7e 8f 90 12 34 56 78", true},
		{good[:39], false},
		{good + "9", false},
		{good[:39] + "g", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c, err := ParseThumbprint(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("err=%v want ok=%v", err, tc.ok)
			}
			if tc.ok && c.Value != strings.ToUpper(good) {
				t.Fatalf("got %q", c.Value)
			}
		})
	}
}

func TestParseTimestamp(t *testing.T) {
	ts, err := ParseTimestamp("16.08.2016 14:03:10")
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2016, 8, 16, 14, 3, 10, 0, time.UTC); !ts.Equal(want) || ts.Location() != time.UTC {
		t.Fatalf("got %v", ts)
	}
	for _, bad := range []string{
		"1.2.2024 3:04:05", "31.02.2024 10:00:00", "01.01.0001 00:00:00", "01.01.0000 00:00:00", "31.12.1969 23:59:59", "16.08.2016 14:03", "16.08.2016T14:03:10",
		"16-08-2016 14:03:10", "16.08.2016 24:00:00", "16.08.2016 14:03:60", " 16.08.2016 14:03:1",
		"2016.08.16 14:03:10", "",
	} {
		if _, err := ParseTimestamp(bad); !errors.Is(err, ErrInvalidTimestamp) {
			t.Errorf("ParseTimestamp(%q) err=%v, want ErrInvalidTimestamp", bad, err)
		}
	}
}

func TestText(t *testing.T) {
	ts := time.Date(2016, 8, 16, 14, 3, 10, 0, time.FixedZone("MSK", 3*3600))
	got := string(Text("ABCdef-123", Credential{Kind: SNILS, Value: "40934200000"}, ts))
	want := "apikey=abcdef-123\r\nid=40934200000\r\ntimestamp=16.08.2016 11:03:10\r\n"
	if got != want {
		t.Fatalf("Text = %q\nwant   %q", got, want)
	}
}

func TestNormalizeAPIKey(t *testing.T) {
	if k, err := NormalizeAPIKey("  KEY-1\n"); err != nil || k != "KEY-1" {
		t.Fatalf("got %q %v", k, err)
	}
	for _, bad := range []string{"", " \n", "a\x00b", "a\rb"} {
		if _, err := NormalizeAPIKey(bad); !errors.Is(err, ErrInvalidAPIKey) {
			t.Errorf("NormalizeAPIKey(%q) err=%v", bad, err)
		}
	}
}

func TestMasked(t *testing.T) {
	if got := (Credential{Kind: Phone, Value: "9161234567"}).Masked(); got != "phone=******4567" {
		t.Fatal(got)
	}
}

func FuzzParsePhone(f *testing.F) {
	for _, s := range []string{"+7 (916) 123-45-67", "89161234567", "abc", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParsePhone(s)
		if err != nil {
			return
		}
		if len(c.Value) != 10 || strings.Trim(c.Value, "0123456789") != "" {
			t.Fatalf("ParsePhone(%q) = %q, not 10 digits", s, c.Value)
		}
		if again, err := ParsePhone(c.Value); err != nil || again != c {
			t.Fatalf("normalized value %q does not parse to itself: %v", c.Value, err)
		}
	})
}

func FuzzParseSNILS(f *testing.F) {
	for _, s := range []string{"112-233-445 95", "40934200000", "x"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, legacy bool) {
		c, err := ParseSNILS(s, Options{AllowLegacySNILS: legacy})
		if err != nil {
			return
		}
		if len(c.Value) != 11 || strings.Trim(c.Value, "0123456789") != "" {
			t.Fatalf("ParseSNILS(%q) = %q", s, c.Value)
		}
		if !legacy && SNILSCheck(c.Value[:9]) != c.Value[9:] {
			t.Fatalf("accepted %q with a wrong check number", s)
		}
	})
}

func FuzzParseThumbprint(f *testing.F) {
	f.Add("A1:B2:C3:D4:E5:F6:07:18:29:3A:4B:5C:6D:7E:8F:90:12:34:56:78")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseThumbprint(s)
		if err != nil {
			return
		}
		if len(c.Value) != 40 || strings.Trim(c.Value, "0123456789ABCDEF") != "" {
			t.Fatalf("ParseThumbprint(%q) = %q", s, c.Value)
		}
	})
}

func FuzzParseTimestamp(f *testing.F) {
	f.Add("16.08.2016 14:03:10")
	f.Add("31.02.2024 10:00:00")
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseTimestamp(s)
		if err != nil {
			return
		}
		if FormatTimestamp(ts) != s {
			t.Fatalf("ParseTimestamp(%q) formats back as %q", s, FormatTimestamp(ts))
		}
	})
}

func BenchmarkText(b *testing.B) {
	cred := Credential{Kind: Phone, Value: "9161234567"}
	ts := time.Date(2016, 8, 16, 14, 3, 10, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		_ = Text("0F6C2E5B-9D4A-4C1E-8A2B-7E3D1F0A9B8C", cred, ts)
	}
}
