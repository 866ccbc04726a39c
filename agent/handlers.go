package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"time"

	"github.com/signagent/signagent/agent/auditlog"
	"github.com/signagent/signagent/agent/tokenq"
	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/canonical"
	"github.com/signagent/signagent/trusted"
)

// credential parses the request's credential and records it, masked, in
// the audit entry.
func (a *Agent) credential(c agentapi.Credential, entry *auditlog.Entry) (canonical.Credential, error) {
	cred, err := parseCredential(c, a.cfg.LegacySNILS)
	if err == nil {
		entry.Kind, entry.Credential = cred.Kind.String(), cred.Masked()
	}
	return cred, err
}

// parseCredential returns the one credential c gives.
func parseCredential(c agentapi.Credential, legacy bool) (canonical.Credential, error) {
	return canonical.ParseOne(c.Phone, c.SNILS, c.Thumbprint, canonical.Options{AllowLegacySNILS: legacy})
}

func (a *Agent) signature(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	entry := entryFor(r, "sign")
	var req agentapi.SignatureRequest
	resp, err := func() (*agentapi.SignatureResponse, error) {
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		cred, err := a.credential(req.Credential, &entry)
		if err != nil {
			return nil, err
		}
		var ts time.Time
		if req.Timestamp != "" {
			if ts, err = canonical.ParseTimestamp(req.Timestamp); err != nil {
				return nil, err
			}
		}
		key := a.now().key
		switch {
		case a.tm == nil:
			return nil, tokenq.ErrNoToken
		case key == "":
			return nil, errNoAPIKey
		}
		ts = a.stamp(key, cred, ts)
		text := canonical.Text(key, cred, ts)
		der, cert, err := a.tm.Sign(r.Context(), text, ts)
		if err != nil {
			return nil, err
		}
		thumb := canonical.ThumbprintOf(cert)
		entry.Thumbprint = thumb
		resp := &agentapi.SignatureResponse{Signature: base64.StdEncoding.EncodeToString(der),
			Timestamp: canonical.FormatTimestamp(ts), CertificateThumbprint: thumb}
		if a.now().policy.ExposeCanonical {
			resp.Canonical = string(text)
		}
		return resp, nil
	}()
	a.finish(w, r, entry, start, resp, err)
}

// stamp is the timestamp of a text handed to a caller: ts when the caller
// chose one, else now (or a later second when a session of this agent
// sent this credential's text in this second); either way the sessions'
// Stamps records it, so that the agent never sends that text itself.
func (a *Agent) stamp(apiKey string, cred canonical.Credential, ts time.Time) time.Time {
	c := a.now().client
	switch {
	case c == nil && ts.IsZero():
		return canonical.Now()
	case c == nil:
		return ts
	case ts.IsZero():
		return c.Stamps().Handout(time.Now, apiKey, cred)
	}
	c.Stamps().Note(time.Now, apiKey, cred, ts)
	return ts
}

func (a *Agent) session(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	entry := entryFor(r, "session")
	var req agentapi.SessionRequest
	resp, err := func() (*agentapi.SessionResponse, error) {
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		cred, err := a.credential(req.Credential, &entry)
		if err != nil {
			return nil, err
		}
		if err := trusted.CheckServiceUserID(req.ServiceUserID); err != nil {
			return nil, err
		}
		c := a.now().client
		if c == nil {
			return nil, errNotConfigured
		}
		k := trusted.SessionKey{Kind: cred.Kind, Value: cred.Value, ServiceUserID: req.ServiceUserID}
		s, source, err := a.cache.Obtain(r.Context(), k, req.Refresh, a.cfg.RefreshFloor, a.cfg.RequestDeadline,
			func(ctx context.Context) (*trusted.Session, error) { return a.login(ctx, c, cred, req.ServiceUserID) })
		if err != nil {
			return nil, err
		}
		cached := source != trusted.FromLogin
		a.metrics.Session(source)
		entry.Cached, entry.Source = &cached, source
		if cert := a.tm.Certificate(); cert != nil {
			entry.Thumbprint = canonical.ThumbprintOf(cert)
		}
		return &agentapi.SessionResponse{Sid: s.Sid, ObtainedAt: agentapi.At(s.ObtainedAt), Cached: cached}, nil
	}()
	a.finish(w, r, entry, start, resp, err)
}

// dropSession forgets a cached Sid: DELETE /v1/sessions?phone=...&serviceUserId=...
func (a *Agent) dropSession(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	entry := entryFor(r, "drop-session")
	q := r.URL.Query()
	resp, err := func() (*agentapi.DropResponse, error) {
		cred, err := a.credential(agentapi.Credential{Phone: q.Get("phone"), SNILS: q.Get("snils"), Thumbprint: q.Get("thumbprint")}, &entry)
		if err != nil {
			return nil, err
		}
		id := q.Get("serviceUserId")
		if err := trusted.CheckServiceUserID(id); err != nil {
			return nil, err
		}
		return &agentapi.DropResponse{Dropped: a.cache.Drop(trusted.SessionKey{Kind: cred.Kind, Value: cred.Value, ServiceUserID: id})}, nil
	}()
	a.finish(w, r, entry, start, resp, err)
}

func (a *Agent) link(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	entry := entryFor(r, "link")
	var req agentapi.LinkRequest
	resp, err := func() (*agentapi.LinkResponse, error) {
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		phone, err := canonical.ParsePhone(req.Phone)
		if err != nil {
			return nil, err
		}
		entry.Kind, entry.Credential = phone.Kind.String(), phone.Masked()
		c := a.now().client
		if c == nil {
			return nil, errNotConfigured
		}
		if err := c.Link(r.Context(), req.ServiceUserID, phone); err != nil {
			return nil, err
		}
		return &agentapi.LinkResponse{Linked: true}, nil
	}()
	a.finish(w, r, entry, start, resp, err)
}

// finish writes the answer, the audit line and, on failure, the log line.
func (a *Agent) finish(w http.ResponseWriter, r *http.Request, entry auditlog.Entry, start time.Time, resp any, err error) {
	entry.Latency = time.Since(start)
	if err != nil {
		status, apiErr := classify(err)
		entry.Outcome, entry.ServiceCode = apiErr.Code, apiErr.ServiceCode
		a.audit.Write(entry)
		ev := a.cfg.Log.Info()
		if status >= 500 {
			ev = a.cfg.Log.Warn()
		}
		if errors.Is(err, tokenq.ErrQueueFull) {
			a.metrics.Rejected()
		}
		ev.Str("client", entry.Caller).Str("operation", entry.Operation).Int("status", status).Str("code", apiErr.Code).Str("requestId", entry.RequestID).Msg(apiErr.Message)
		retryAfter(w, err)
		writeError(w, status, apiErr)
		return
	}
	entry.Outcome = "ok"
	a.audit.Write(entry)
	writeJSON(w, http.StatusOK, resp)
}
