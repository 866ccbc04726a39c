// Package kit is what the emulator's sides share and the server owns: the
// clock, the request and rejection counts, the faults a test queues, the
// refusal an answer becomes, and the service's two error formats. It
// knows no side.
package kit

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	"github.com/signagent/signagent/safefile"
	"github.com/signagent/signagent/signer"
)

// Codes more than one side answers with: the service's HTTP-level codes
// of its business API (X-Service-ErrorCode), and the emulator's own for a
// failure inside it.
const (
	CodeHTTPAuth         = "Http.Auth"
	CodeBadRequest       = "Http.BadRequest"
	CodeInvalidAuthToken = "Http.Auth.InvalidToken"
	CodeInternal         = "InternalError"
	// ErrorCodeHeader carries the code of a business-API answer.
	ErrorCodeHeader = "X-Service-ErrorCode"
)

// Refusal is an error answer: its status, its code and, for the
// emulator's log, why.
type Refusal struct {
	Status int
	Code   string
	Why    string
}

// Refuse makes a Refusal.
func Refuse(status int, code, why string) *Refusal { return &Refusal{status, code, why} }

// Fault is an answer the emulator gives instead of serving a request: a
// delay, then (when Status is set) that status with Code (default
// InternalError). Tests use it to drive the client's retries and time-outs,
// and to have the service say what timing alone cannot make it say on cue.
type Fault struct {
	Delay  time.Duration
	Status int
	Code   string
	// RetryAfter, when not empty, is sent as the Retry-After header (a
	// 429 or 503 that asks the client to wait).
	RetryAfter string
}

// Duration is a time.Duration written as "5m" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 5m or 30s", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// Default sets *d to def when it is not positive.
func (d *Duration) Default(def time.Duration) {
	if *d <= 0 {
		*d = Duration(def)
	}
}

// Env is what the server gives every side: its log, its clock, its counts,
// the faults queued for the side's steps, and the address it serves on.
type Env struct {
	Log zerolog.Logger
	URL func() string

	mu         sync.Mutex
	now        func() time.Time
	requests   map[string]int
	rejections map[string]int
	faults     map[string][]Fault
}

// NewEnv is an Env on the system clock.
func NewEnv(log zerolog.Logger, url func() string) *Env {
	return &Env{Log: log, URL: url, now: time.Now, requests: map[string]int{}, rejections: map[string]int{}, faults: map[string][]Fault{}}
}

// Now is the emulator's clock.
func (e *Env) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now()
}

// SetClock replaces the clock (for tests of expiry and skew).
func (e *Env) SetClock(now func() time.Time) {
	e.mu.Lock()
	e.now = now
	e.mu.Unlock()
}

// Reject counts a refusal by its code.
func (e *Env) Reject(code string) {
	e.mu.Lock()
	e.rejections[code]++
	e.mu.Unlock()
}

// Counts are copies of the requests by step and the rejections by code.
func (e *Env) Counts() (requests, rejections map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.requests), maps.Clone(e.rejections)
}

// InjectFaults queues faults for a step; each request to it takes the
// next one.
func (e *Env) InjectFaults(step string, faults ...Fault) {
	e.mu.Lock()
	e.faults[step] = append(e.faults[step], faults...)
	e.mu.Unlock()
}

// TakeFault counts a request to step and applies the next fault queued
// for it, answering with writeErr (the side's error format); it reports
// whether the fault answered the request.
func (e *Env) TakeFault(w http.ResponseWriter, r *http.Request, step string, writeErr func(w http.ResponseWriter, status int, code string)) bool {
	e.mu.Lock()
	e.requests[step]++
	var fault *Fault
	if q := e.faults[step]; len(q) > 0 {
		fault, e.faults[step] = &q[0], q[1:]
	}
	e.mu.Unlock()
	if fault == nil {
		return false
	}
	log := e.Log.With().Str("step", step).Logger()
	if fault.Delay > 0 {
		select {
		case <-time.After(fault.Delay):
		case <-r.Context().Done():
			log.Info().Msg("injected delay: the client gave up")
			return true
		}
	}
	if fault.Status == 0 {
		return false
	}
	log.Info().Int("status", fault.Status).Msg("injected fault")
	if fault.RetryAfter != "" {
		w.Header().Set("Retry-After", fault.RetryAfter)
	}
	code := fault.Code
	if code == "" {
		code = CodeInternal
	}
	writeErr(w, fault.Status, code)
	return true
}

// WriteJSON writes v as the answer's JSON body.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(status)
	if v != nil {
		json.NewEncoder(w).Encode(v)
	}
}

// CodeJSON writes the trusted API's error: {"Code": code}.
func CodeJSON(w http.ResponseWriter, status int, code string) {
	WriteJSON(w, status, map[string]string{"Code": code})
}

// PlainError writes the business API's error (the legacy scheme's and the
// business methods'): a plain-text body and the code in
// X-Service-ErrorCode.
func PlainError(w http.ResponseWriter, status int, code, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if code != "" {
		w.Header().Set(ErrorCodeHeader, code)
	}
	w.WriteHeader(status)
	io.WriteString(w, text)
}

// PlainFault is PlainError as a fault's answer.
func PlainFault(w http.ResponseWriter, status int, code string) {
	PlainError(w, status, code, "Internal server error")
}

// RandomHex is n random bytes in upper-case hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return strings.ToUpper(hex.EncodeToString(b))
}

// RandomToken is n random bytes in URL-safe base64.
func RandomToken(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Resolve is p relative to dir, unless absolute.
func Resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// LoadCerts reads certificates from inline PEM or a PEM file (relative to
// dir).
func LoadCerts(dir, spec string) ([]*x509.Certificate, error) {
	data := []byte(spec)
	if !strings.Contains(spec, "-----BEGIN") {
		b, err := safefile.Read(Resolve(dir, spec), 4<<20)
		if err != nil {
			return nil, err
		}
		data = b
	}
	certs, err := signer.ParseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("%.40q: %w", spec, err)
	}
	return certs, nil
}

// ReadSecret reads a small secret a configuration names by file.
func ReadSecret(dir, file string) (string, error) {
	b, err := safefile.Read(Resolve(dir, file), 4096)
	return string(b), err
}
