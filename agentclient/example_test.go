package agentclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/agentclient"
)

// A partner system obtains an auth.sid for its user over the agent's socket,
// and drops it when the service rejects it.
func Example() {
	c := agentclient.NewUnix("/run/signagent/agent.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	req := agentapi.SessionRequest{Credential: agentapi.Credential{SNILS: "112-233-445 95"}, ServiceUserID: "crm-user-42"}
	s, err := c.Session(ctx, req)
	var e *agentclient.Error
	switch {
	case errors.As(err, &e) && e.Body.Code == agentapi.CodeServiceRefused:
		log.Fatalf("the service refused (%s at %s): %s", e.Body.ServiceCode, e.Body.Step, e.Body.Message)
	case errors.As(err, &e) && e.Temporary():
		log.Fatalf("try again in %v: %s", e.RetryAfter, e.Body.Message)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println("auth.sid obtained at", s.ObtainedAt, "cached:", s.Cached)

	// Later, the service answered 401 to a call made with this sid.
	if _, err := c.DropSession(ctx, req.Credential, req.ServiceUserID); err != nil {
		log.Fatal(err)
	}
}

// Over loopback TCP the agent wants its bearer token.
func ExampleNewTCP() {
	token, err := os.ReadFile("/var/lib/signagent/bearer-token")
	if err != nil {
		log.Fatal(err)
	}
	c := agentclient.NewTCP("http://127.0.0.1:8700", strings.TrimSpace(string(token)), nil)
	sig, err := c.Sign(context.Background(), agentapi.SignatureRequest{Credential: agentapi.Credential{Phone: "+7 916 123-45-67"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sig.Timestamp, sig.CertificateThumbprint)
}
