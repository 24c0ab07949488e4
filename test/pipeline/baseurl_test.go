package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/executor"
)

// subscribeAll receives a copy of every message on the subjects of all nodes of the test cluster that
// subjectOf names for one node; drain returns the bodies received so far.
func (e *env) subscribeAll(subjectOf func(cluster, node string) (string, error)) (drain func() [][]byte) {
	e.t.Helper()
	one, err := subjectOf(cluster, "pve1")
	if err != nil {
		e.t.Fatal(err)
	}
	sub, err := e.bus.Conn().SubscribeSync(one[:strings.LastIndexByte(one, '.')+1] + "*")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.bus.Conn().Flush(); err != nil {
		e.t.Fatal(err)
	}
	return func() [][]byte {
		var out [][]byte
		for {
			m, err := sub.NextMsg(200 * time.Millisecond)
			if err != nil {
				return out
			}
			out = append(out, m.Data)
		}
	}
}

// received decodes the message bodies a subscription received.
func received[T any](t *testing.T, drain func() [][]byte, decode func(context.Context, wire.DecodeFunc) (T, error)) []T {
	t.Helper()
	var out []T
	for _, data := range drain() {
		v, err := decode(testContext(t), func(_ context.Context, into proto.Message) error { return proto.Unmarshal(data, into) })
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		out = append(out, v)
	}
	return out
}

// Every observe request and every operation names the base-url the commit declares for the cluster, so an
// executor with its own endpoint can refuse a commit that points the cluster elsewhere.
func TestObserveRequestsAndOperationsCarryTheClustersBaseURL(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	observes := e.subscribeAll(bus.ObserveSubject)
	ops := e.subscribeAll(bus.OpSubject)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	o := e.apply(e.vms(map[string]int{"web-01": 101, "web-02": 102, "db-01": 103}))
	if f := o.last(); f.Succeeded != 3 || f.Failed != 0 {
		t.Fatalf("run: %+v", f.Finished)
	}
	reqs := received(t, observes, wire.DecodeObserveRequest)
	if len(reqs) < 3 {
		t.Fatalf("%d observe requests, want one per node at least", len(reqs))
	}
	for _, r := range reqs {
		if r.BaseURL != e.srv.URL {
			t.Errorf("observe request of %s names base-url %q, want %s", r.Node, r.BaseURL, e.srv.URL)
		}
	}
	sent := received(t, ops, wire.DecodeOperation)
	if len(sent) != 3 {
		t.Fatalf("%d operations dispatched, want 3", len(sent))
	}
	for _, op := range sent {
		if op.BaseURL != e.srv.URL {
			t.Errorf("operation %s %s names base-url %q, want %s", op.Ref, op.Action, op.BaseURL, e.srv.URL)
		}
	}
}

// Executors deployed with their own endpoint apply a commit whose base-url is theirs; a later commit that
// points the cluster at another host is rejected when its nodes are observed, and nothing is written.
func TestACommitCannotRedirectExecutorsWithTheirOwnEndpoint(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	for _, n := range []string{"pve1", "pve2", "pve3"} {
		e.startExecutor(cluster, n, e.connect(), func(c *executor.Config) { c.OwnEndpoint = true })
	}
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101})
	if f := e.apply(files).last(); f.Succeeded != 1 {
		t.Fatalf("run with the executors' own base-url: %+v", f.Finished)
	}
	const elsewhere = "https://pve.attacker.example:8006"
	files = e.vms(map[string]int{"web-01": 101, "web-02": 102})
	files["clusters/lab/config.yaml"] = strings.Replace(files["clusters/lab/config.yaml"], e.srv.URL, elsewhere, 1)
	e.sim.ResetLog()
	o := e.wait(e.announce(files, false), time.Minute)
	if len(o.rejected) != 1 || o.rejected[0].Rejection.Reason != plan.RejectObserve {
		t.Fatalf("redirected commit: %+v; want it rejected as unobservable", o)
	}
	ds := o.rejected[0].Rejection.Diagnostics.Error()
	if !strings.Contains(ds, "pve inventory read failed: node pve") || !strings.Contains(ds, ": refused: ") ||
		!strings.Contains(ds, elsewhere) || !strings.Contains(ds, e.srv.URL) {
		t.Errorf("diagnostics %q do not name both the commit's base-url and the executors' endpoint", ds)
	}
	if n := len(e.sim.Requests()); n != 0 {
		t.Fatalf("%d requests reached PVE for a redirected commit: %v", n, e.sim.Counts())
	}
	if e.sim.Exists(102) {
		t.Fatal("guest 102 was created")
	}
}
