package trusted_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
	"github.com/signagent/signagent/trusted"
)

// TestOversizedAnswerRefused: an answer of the service is read up to
// 64 KiB and refused past it in one line naming the limit (before, it
// was cut there and the call succeeded). An error status says enough on
// its own: a large error page is still reported by its status.
func TestOversizedAnswerRefused(t *testing.T) {
	const limit = 64 << 10
	for _, tc := range []struct {
		name   string
		status int
		size   int
		check  func(err error) bool
	}{
		{"exactly the limit", http.StatusOK, limit, func(err error) bool { return err == nil }},
		{"a byte over", http.StatusOK, limit + 1, func(err error) bool {
			return errors.Is(err, errdefs.ErrUnreachable) && !strings.Contains(err.Error(), "\n") &&
				strings.HasSuffix(err.Error(), ": the answer is larger than signagent reads (64 KiB)")
		}},
		{"a large error page", http.StatusBadGateway, 4 * limit, func(err error) bool {
			var se *trusted.ServiceError
			return errors.As(err, &se) && se.Status == http.StatusBadGateway
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				w.Write([]byte(strings.Repeat(" ", tc.size)))
			}))
			defer srv.Close()
			c, err := trusted.New(trusted.Config{BaseURL: srv.URL, APIKey: apiKey, Settings: httpx.Settings{Timeout: 5 * time.Second, Attempts: 1}})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Link(context.Background(), serviceUser, canonical.Credential{Kind: canonical.Phone, Value: userPhone})
			if !tc.check(err) {
				t.Fatalf("a %d answer of %d bytes: %v", tc.status, tc.size, err)
			}
			if err != nil {
				t.Log(err)
				assertNoSecrets(t, err.Error())
			}
		})
	}
}
