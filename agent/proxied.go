package agent

import (
	"fmt"
	"net/http"
	"time"

	"github.com/signagent/signagent/agent/auditlog"
	"github.com/signagent/signagent/agent/health"
	"github.com/signagent/signagent/agent/proxy"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/internal/httpx"
)

// The agent's side of the proxy (package proxy): the business API it
// forwards to, and each call's record: the identity's observed Authorizer,
// the audit line, the metrics, the log and the error answer.

// proxyAgent is the Agent the proxy asks.
type proxyAgent struct{ a *Agent }

func (p proxyAgent) Target() *proxy.Target { return p.a.now().target }

func (p proxyAgent) Begin(r *http.Request) proxy.Record {
	return &proxyRecord{a: p.a, entry: entryFor(r, "service")}
}

// proxyRecord is a proxied call's audit entry.
type proxyRecord struct {
	a     *Agent
	entry auditlog.Entry
}

func (c *proxyRecord) RequestID() string { return c.entry.RequestID }

func (c *proxyRecord) Authorizer(sel authz.Selector) (authz.Authorizer, error) {
	return c.a.authorizer(sel, &c.entry)
}

func (c *proxyRecord) Answering(call *proxy.Call) {
	c.a.metrics.Call(call.Method, call.Status, call.Retried)
	var err error
	if call.Status >= 500 {
		err = errdefs.New(errdefs.ErrFailing, fmt.Sprintf("the service answered %s with HTTP %d", call.Call, call.Status))
	}
	c.a.deps.Saw(health.Service, err)
	c.a.metrics.ServiceDate(call.Date, call.At)
}

// auditCutOff is the audit outcome of a proxied answer that did not reach
// the caller whole: the deadline passed, or the caller or the service went
// away while it streamed.
const auditCutOff = "answer_cut_off"

func (c *proxyRecord) Answered(call *proxy.Call) {
	if call.CutOff != nil {
		c.a.cfg.Log.Warn().Str("client", c.entry.Caller).Str("operation", "service").Str("call", call.Call).
			Str("requestId", c.entry.RequestID).Msgf("the answer was cut off during the body copy: %v", call.CutOff)
	}
	c.entry.Outcome = "ok"
	if !call.Complete {
		c.entry.Outcome = auditCutOff
	}
	c.entry.Call, c.entry.Latency, c.entry.Status, c.entry.Retried = call.Call, time.Since(call.Start), call.Status, call.Retried
	c.a.audit.Write(c.entry)
}

func (c *proxyRecord) Failed(w http.ResponseWriter, call *proxy.Call, err error) {
	status, apiErr := classify(err)
	c.a.metrics.Call(call.Method, status, call.Retried)
	if call.Unanswered {
		c.a.deps.Saw(health.Service, err)
	}
	c.entry.Call, c.entry.Outcome, c.entry.ServiceCode, c.entry.Latency = call.Call, apiErr.Code, apiErr.ServiceCode, time.Since(call.Start)
	c.entry.Retried = call.Retried
	c.a.audit.Write(c.entry)
	ev := c.a.cfg.Log.Info()
	if status >= 500 {
		ev = c.a.cfg.Log.Warn()
	}
	ev.Str("client", c.entry.Caller).Str("operation", "service").Str("call", call.Call).Int("status", status).Str("code", apiErr.Code).Str("requestId", c.entry.RequestID).Msg(apiErr.Message)
	retryAfter(w, err)
	w.Header().Set(proxy.ErrorHeader, apiErr.Code)
	writeError(w, status, apiErr)
}

func (c *proxyRecord) Refused(w http.ResponseWriter, status int, code, message string) {
	writeError(w, status, APIError{Code: code, Message: message})
}

// proxyTarget is the proxy's target for cfg's business API (the current
// one when the address and the bounds of its heads are the same, its
// connections kept; nil for none).
func (a *Agent) proxyTarget(cfg Config) (*proxy.Target, error) {
	t, err := proxy.TargetFor(a.now().target, cfg.APIURL, cfg.AllowInsecureAPI,
		httpx.HeadLimits{Fields: cfg.ServiceMaxHeaderFields, Bytes: cfg.ServiceMaxHeaderBytes})
	if err != nil {
		return nil, badConfig(fmt.Errorf("--business-url: %w", err))
	}
	return t, nil
}
