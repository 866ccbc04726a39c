// Package agentapi holds the JSON types of the signagent agent's HTTP API
// (docs/openapi.yaml), shared by the agent and by agentclient. It imports
// nothing of the agent, so a partner's program that uses agentclient does
// not build PKCS#11 code.
package agentapi

// Credential is the credential of a request: exactly one field is set.
type Credential struct {
	Phone      string `json:"phone,omitempty"`
	SNILS      string `json:"snils,omitempty"`
	Thumbprint string `json:"thumbprint,omitempty"`
}

// SignatureRequest is the body of POST /v1/signatures.
type SignatureRequest struct {
	Credential
	// Timestamp is dd.MM.yyyy HH:mm:ss in UTC; empty means now.
	Timestamp string `json:"timestamp,omitempty"`
}

// SignatureResponse is the answer of POST /v1/signatures.
type SignatureResponse struct {
	Signature             string `json:"signature"`           // base64 of the DER of the detached CMS
	Canonical             string `json:"canonical,omitempty"` // the signed text (it holds the API key); only with --expose-canonical
	Timestamp             string `json:"timestamp"`
	CertificateThumbprint string `json:"certificateThumbprint"`
}

// SessionRequest is the body of POST /v1/sessions.
type SessionRequest struct {
	Credential
	ServiceUserID string `json:"serviceUserId"`
	// Refresh skips the cache, e.g. after the service rejected a cached Sid.
	Refresh bool `json:"refresh,omitempty"`
}

// SessionResponse is the answer of POST /v1/sessions.
type SessionResponse struct {
	Sid        string `json:"sid"`
	ObtainedAt Time   `json:"obtainedAt"`
	Cached     bool   `json:"cached"`
}

// DropResponse is the answer of DELETE /v1/sessions.
type DropResponse struct {
	Dropped bool `json:"dropped"`
}

// LinkRequest is the body of POST /v1/links.
type LinkRequest struct {
	ServiceUserID string `json:"serviceUserId"`
	Phone         string `json:"phone"`
}

// LinkResponse is the answer of POST /v1/links.
type LinkResponse struct {
	Linked bool `json:"linked"`
}

// HealthResponse is the answer of GET /healthz.
type HealthResponse struct {
	Status string `json:"status"`
}

// TokenState is the token's state.
type TokenState struct {
	Ready      bool   `json:"ready"`
	Reason     string `json:"reason,omitempty"`
	Since      Time   `json:"since"`
	Key        string `json:"key,omitempty"`
	Thumbprint string `json:"certificateThumbprint,omitempty"`
	// PINRejected means the token refused the PIN: the agent does not try
	// again on its own (a card locks after a few tries); fix the PIN and
	// send SIGHUP.
	PINRejected bool `json:"pinRejected,omitempty"`
}

// ReadyResponse is the answer of GET /readyz.
type ReadyResponse struct {
	// Status is StatusReady, StatusDegraded (200: a shared dependency
	// fails, the agent serves what it can) or StatusNotReady (503).
	Status string `json:"status"`
	// Checks has one entry per configured part of the agent: "token"
	// (when the agent signs), "oidc" (OpenID Connect: its token store),
	// "legacy"; and per shared dependency (Dependency set): "store" (the
	// shared store, when configured), "service" and "idp" (the identity
	// provider) once the agent has called them. The agent is not ready
	// when one of its own parts is not; a dependency not ready makes it
	// degraded.
	Checks map[string]Check `json:"checks"`
	// Token is the token's state in detail, when the agent has a token.
	Token TokenState `json:"token,omitzero"`
	// Queue is the token's queue, when the agent has a token.
	Queue *QueueState `json:"queue,omitempty"`
	// StoreFormats are the shared store's record formats this agent reads
	// and writes, when it has a shared store (docs/upgrading.md).
	StoreFormats *StoreFormats `json:"storeFormats,omitempty"`
}

// StoreFormats are the record formats an agent reads and the one it
// writes now (the highest every live agent on the store reads), and the
// live agents that announced theirs, counted by the formats they read.
type StoreFormats struct {
	Read   []int          `json:"read"`
	Write  int            `json:"write"`
	Agents map[string]int `json:"agents,omitempty"`
}

// QueueState is the token's queue: operations waiting or running, and
// those dropped since the start because their deadline passed.
type QueueState struct {
	Depth   int `json:"depth"`
	Dropped int `json:"dropped"`
}

// The readiness statuses of ReadyResponse.
const (
	StatusReady    = "ready"
	StatusDegraded = "degraded"
	StatusNotReady = "not ready"
)

// Check is one part's readiness; Reason says why it is not ready.
// Dependency marks a part the agents share (the store, the service, the
// identity provider): failing, it makes the agent degraded, not unready.
type Check struct {
	Ready      bool   `json:"ready"`
	Reason     string `json:"reason,omitempty"`
	Dependency bool   `json:"dependency,omitempty"`
}

// ErrorBody is the JSON of every error answer.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error says what went wrong. ServiceCode and Step are set when the service
// refused or failed.
type Error struct {
	Code        string `json:"code"`
	Message     string `json:"message"`
	ServiceCode string `json:"serviceCode,omitempty"`
	Step        string `json:"step,omitempty"`
}

// The agent's error codes.
const (
	CodeBadInput           = "bad_input"              // 400
	CodeUnauthorized       = "unauthorized"           // 401
	CodeForbidden          = "forbidden"              // 403
	CodeNotFound           = "not_found"              // 404
	CodeMethodNotAllowed   = "method_not_allowed"     // 405
	CodeTooLarge           = "body_too_large"         // 413
	CodeServiceRefused     = "service_refused"        // 422
	CodeSignInRequired     = "sign_in_required"       // 409
	CodeQueueFull          = "queue_full"             // 429
	CodeLoginBackoff       = "login_backoff"          // 429: a certificate login's wait after a failure is not over
	CodeInternal           = "internal"               // 500
	CodeServiceError       = "service_error"          // 502
	CodeServiceUnreachable = "service_unreachable"    // 502
	CodeTokenNotReady      = "token_not_ready"        // 503
	CodeNotConfigured      = "service_not_configured" // 503
	CodeBusy               = "busy"                   // 503: the proxy's budget of held bodies is full
	CodeStoreUnavailable   = "store_unavailable"      // 503: the shared store does not answer
	CodeStoreFormatNewer   = "store_format_newer"     // 503: a record in the store is of a format newer than this agent reads
	CodeServiceTimeout     = "service_timeout"        // 504
	CodeTokenTimeout       = "token_timeout"          // 504
)

// AuthorizationRequest is the body of POST /v1/authorizations: which
// scheme, and who. For the legacy scheme, by is "password" (login names an
// account whose password is in the agent's configuration), "certificate"
// (the agent's token key decrypts the challenge) or "sid" (an auth.sid
// given, or one obtained by trusted authentication for credential and
// serviceUserId).
type AuthorizationRequest struct {
	Scheme        string      `json:"scheme"`
	By            string      `json:"by,omitempty"`
	Login         string      `json:"login,omitempty"`
	Sid           string      `json:"sid,omitempty"`
	Credential    *Credential `json:"credential,omitempty"`
	ServiceUserID string      `json:"serviceUserId,omitempty"`
	// Profile is the token store's profile of scheme oidc (default
	// "default"), signed in with signagent oidc login.
	Profile string `json:"profile,omitempty"`
	// Refresh skips the cache, e.g. after the service answered 401.
	Refresh bool `json:"refresh,omitempty"`
}

// Identity is one identity the agent holds a header for (GET
// /v1/identities, signagent agent identities): never the header itself.
type Identity struct {
	Scheme   string `json:"scheme"`
	Identity string `json:"identity"` // as the audit log names it, without a secret
	// Subject is whom the header speaks for, when the scheme learnt it.
	Subject string `json:"subject,omitempty"`
	// Header is the header value masked: its first and last characters.
	Header    string `json:"header"`
	ExpiresAt Time   `json:"expiresAt"`
	LastUsed  Time   `json:"lastUsed"`
	Uses      int    `json:"uses"`
}

// IdentitiesResponse is the answer of GET /v1/identities.
type IdentitiesResponse struct {
	Identities []Identity `json:"identities"`
}

// AuthorizationResponse is the Authorization header value of a business
// call and until when the agent takes it to be valid.
type AuthorizationResponse struct {
	Authorization string `json:"authorization"`
	ExpiresAt     Time   `json:"expiresAt"`
	Cached        bool   `json:"cached"`
}
