package health

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/signagent/signagent/agentapi"
	"github.com/signagent/signagent/authz"
	"github.com/signagent/signagent/errdefs"
	"github.com/signagent/signagent/store"
)

// scheme is a scheme that can say whether it serves (schemes.Checker).
type scheme struct {
	name string
	err  error
}

func (s scheme) Name() string { return s.name }
func (s scheme) Authorizer(authz.Selector) (authz.Authorizer, error) {
	return nil, errors.New("unused")
}
func (s scheme) Check() error { return s.err }

// silent is a scheme that cannot say: it is left out of the checks.
type silent struct{ scheme }

func (silent) Check() {}

// TestSawCountsOnlyUnanswered: a call that succeeded marks its dependency
// up; one that it did not answer or failed (unreachable, a time-out, a
// 5xx) marks it down, with the first line of the error; a refusal or an
// error before the call says nothing of it.
func TestSawCountsOnlyUnanswered(t *testing.T) {
	var d Dependencies
	if _, ok := d.Get(Service); ok {
		t.Fatal("a dependency not called yet is reported")
	}
	d.Saw(Service, errdefs.New(errdefs.ErrRefused, "the service refused the call"))
	d.Saw(IdP, errdefs.New(errdefs.ErrInvalidInput, "a bad profile name"))
	if up := d.Up(); len(up) != 0 {
		t.Fatalf("a refusal or the caller's error recorded a dependency: %v", up)
	}
	d.Saw(Service, errdefs.New(errdefs.ErrUnreachable, "connect: connection refused\nsecond line"))
	if s, ok := d.Get(Service); !ok || s.Up || s.Reason != "connect: connection refused" {
		t.Fatalf("an unreachable service: %+v %v", s, ok)
	}
	for _, kind := range []error{errdefs.ErrTimeout, errdefs.ErrFailing} {
		d.Saw(IdP, nil)
		d.Saw(IdP, errdefs.New(kind, "down"))
		if s, _ := d.Get(IdP); s.Up {
			t.Fatalf("%v left the identity provider up", kind)
		}
	}
	d.Saw(Service, nil)
	if up := d.Up(); !up[Service] || up[IdP] || len(up) != 2 {
		t.Fatalf("up: %v", up)
	}
	d.Forget(IdP)
	if _, ok := d.Get(IdP); ok {
		t.Fatal("a dependency forgotten is still reported")
	}
}

// TestSnapshotsAreNotShared: a snapshot a reader holds is never changed
// under it (a writer replaces it), under concurrent writers and readers
// (go test -race).
func TestSnapshotsAreNotShared(t *testing.T) {
	var d Dependencies
	d.Set(Store, nil)
	held := d.snapshot()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				d.Set(fmt.Sprintf("dep%d", i), fmt.Errorf("%d", j))
				_ = d.Up()
			}
		})
	}
	wg.Wait()
	if len(held) != 1 || !held[Store].Up {
		t.Fatalf("the held snapshot changed: %v", held)
	}
	if n := len(d.Up()); n != 9 {
		t.Fatalf("%d dependencies, want 9", n)
	}
}

// records is a shared store as the report sees it.
type records struct{ store.Records }

func (records) Formats() store.Formats { return store.Formats{Read: []int{2, 3}, Write: 3} }

// TestReport: the agent's own parts decide ready or not ready; a shared
// dependency down makes it degraded, never not ready; a shared store not
// probed yet counts as down; a scheme that cannot say is left out.
func TestReport(t *testing.T) {
	var deps Dependencies
	parts := Parts{Schemes: authz.Schemes{scheme{name: "oidc"}, silent{scheme{name: "legacy"}}}}
	got := Report(parts, &deps)
	if got.Status != agentapi.StatusReady || len(got.Checks) != 1 || !got.Checks["oidc"].Ready || got.Queue != nil {
		t.Fatalf("no store, every scheme serving: %+v", got)
	}

	parts.Shared = records{}
	got = Report(parts, &deps)
	if got.Status != agentapi.StatusDegraded || got.Checks[Store].Ready || !got.Checks[Store].Dependency ||
		got.Checks[Store].Reason != "the shared store is not checked yet" {
		t.Fatalf("a store not probed yet: %+v", got)
	}
	if f := got.StoreFormats; f == nil || f.Write != 3 || len(f.Read) != 2 {
		t.Fatalf("the store's formats: %+v", f)
	}
	deps.Set(Store, nil)
	deps.Saw(Service, errdefs.New(errdefs.ErrTimeout, "the service did not answer in 10s"))
	got = Report(parts, &deps)
	if got.Status != agentapi.StatusDegraded || !got.Checks[Store].Ready ||
		got.Checks[Service].Reason != "the service did not answer in 10s" {
		t.Fatalf("the service down: %+v", got)
	}
	deps.Saw(Service, nil)
	if got = Report(parts, &deps); got.Status != agentapi.StatusReady {
		t.Fatalf("everything up: %+v", got)
	}

	parts.Schemes = authz.Schemes{scheme{name: "oidc", err: errors.New("profile crm: sign in again")}}
	deps.Set(Store, errors.New("connection refused"))
	got = Report(parts, &deps)
	if got.Status != agentapi.StatusNotReady || got.Checks["oidc"].Reason != "profile crm: sign in again" {
		t.Fatalf("a scheme that cannot serve, the store down: %+v", got)
	}
}
