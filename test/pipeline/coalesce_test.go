package pipeline_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/executor"
	"github.com/proxops/proxops/services/planner"
)

// publishEvent publishes a RepoChanged as the watcher would.
func (e *env) publishEvent(ev event.RepoChanged) {
	e.t.Helper()
	m, err := wire.RepoChangedToProto(ev)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.bus.Publish(testContext(e.t), bus.SubjectRepoChanged, m, bus.WithMsgID(ev.EventID)); err != nil {
		e.t.Fatalf("publish repo changed: %v", err)
	}
}

// trigger is an event for a stored tree: requestID names the requester ("" for a trigger nobody waits on).
func trigger(tree, commit string, tr event.Trigger, n int, requestID string) event.RepoChanged {
	return event.RepoChanged{Repo: "/srv/ops", Branch: "main", Commit: commit, Tree: tree, Trigger: tr,
		EventID: fmt.Sprintf("/srv/ops@%s#%s-%d", commit, tr, n), RequestID: requestID}
}

// allEvents reads every plan event of the test cluster.
func (e *env) allEvents() outcome {
	e.t.Helper()
	filter, _ := bus.PlanFilter(cluster)
	var o outcome
	ctx := testContext(e.t)
	err := e.bus.ReadStream(ctx, bus.StreamPlans, filter, 0, func(m *bus.Message) error {
		switch {
		case strings.HasSuffix(m.Subject, ".planned"):
			v, err := wire.DecodePlanned(ctx, m.Decode)
			o.planned = append(o.planned, v)
			return err
		case strings.HasSuffix(m.Subject, ".finished"):
			v, err := wire.DecodeFinished(ctx, m.Decode)
			o.finished = append(o.finished, v)
			return err
		case strings.HasSuffix(m.Subject, ".rejected"):
			v, err := wire.DecodeRejected(ctx, m.Decode)
			o.rejected = append(o.rejected, v)
			return err
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("read plan events: %v", err)
	}
	return o
}

// runOf returns the run that answers a request, and its end (nil while it runs).
func (o outcome) runOf(requestID string) (*plan.Planned, *plan.FinishedRun) {
	for i := range o.planned {
		p := &o.planned[i]
		if p.RequestID != requestID && !slices.Contains(p.RequestIDs, requestID) {
			continue
		}
		for j := range o.finished {
			if o.finished[j].RunID == p.RunID {
				return p, &o.finished[j]
			}
		}
		return p, nil
	}
	return nil, nil
}

// The poll of the commit being applied and operators' requests for it while it runs never supersede the
// run: a trigger nobody waits on is left to the run, and requests for the same tree are answered by one
// run after it, whose plan names every one of them.
func TestEqualEventsCoalesceAndNeverSupersede(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(500 * time.Millisecond)}
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"a": 101, "b": 102, "c": 103})
	chain(files, "a", "b", "c")
	tree := e.snapshot(files)
	commit := strings.Repeat("c", 40)

	e.publishEvent(trigger(tree, commit, event.TriggerManual, 1, "req-apply"))
	testkit.Eventually(t, time.Minute, "the first create to reach PVE", func() bool { return e.creates() >= 1 })
	// The poll sees the same commit; two operators ask to apply it while it runs.
	e.publishEvent(trigger(tree, commit, event.TriggerPoll, 2, ""))
	e.publishEvent(trigger(tree, commit, event.TriggerManual, 3, "req-second"))
	e.publishEvent(trigger(tree, commit, event.TriggerManual, 4, "req-third"))
	e.publishEvent(trigger(tree, commit, event.TriggerPoll, 5, ""))

	var o outcome
	testkit.Eventually(t, time.Minute, "every request to be answered", func() bool {
		o = e.allEvents()
		for _, id := range []string{"req-apply", "req-second", "req-third"} {
			if _, f := o.runOf(id); f == nil {
				return false
			}
		}
		return true
	})
	first, f1 := o.runOf("req-apply")
	if f1.Outcome != plan.OutcomeSucceeded || f1.Superseded != 0 {
		t.Fatalf("the applied run ended %s (%d superseded): the same commit must not supersede it", f1.Outcome, f1.Superseded)
	}
	second, f2 := o.runOf("req-second")
	third, _ := o.runOf("req-third")
	if second.RunID != third.RunID || second.RunID == first.RunID {
		t.Fatalf("requests for the same tree while a run is published: runs %s and %s (first %s), want one new run",
			second.RunID, third.RunID, first.RunID)
	}
	if !slices.Contains(second.RequestIDs, "req-second") || !slices.Contains(second.RequestIDs, "req-third") {
		t.Fatalf("the coalesced run names requests %v", second.RequestIDs)
	}
	if f2.Outcome != plan.OutcomeSucceeded || len(second.Plan.Operations) != 0 {
		t.Fatalf("the coalesced run: %s with %d operations, want a succeeded empty plan", f2.Outcome, len(second.Plan.Operations))
	}
	// The polls added no run: two runs in all.
	if len(o.planned) != 2 {
		t.Fatalf("%d runs planned, want 2", len(o.planned))
	}
	if n := e.creates(); n != 3 {
		t.Fatalf("%d creates, want 3", n)
	}
}

// A plan rejected because PVE answers 503 is planned again by itself, with a growing wait shown in the
// cluster's control state, and applies once PVE answers again; no new event is needed.
func TestTransientRejectionIsRetriedWithBackoff(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	unavailable := pvesim.ErrorFault{Method: "GET", Path: "/nodes/{node}/qemu", Rate: 1, Status: 503, Message: "Service Unavailable"}
	if err := e.sim.SetFaults(pvesim.Faults{Errors: []pvesim.ErrorFault{unavailable}}); err != nil {
		t.Fatal(err)
	}
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	ev := e.announce(e.vms(map[string]int{"web-01": 101}), false)

	ctx := testContext(t)
	var ctl wire.ClusterControl
	testkit.Eventually(t, time.Minute, "a second rejection in a row", func() bool {
		var err error
		ctl, err = planner.Control(ctx, e.bus, cluster)
		return err == nil && ctl.RetryAttempt >= 2
	})
	if ctl.RetryAt.IsZero() || !strings.Contains(ctl.RetryReason, "observe_failed") || !strings.Contains(ctl.RetryReason, "503") {
		t.Fatalf("control state while retrying: retry at %v, reason %q", ctl.RetryAt, ctl.RetryReason)
	}
	o := e.events(ev.EventID)
	if len(o.rejected) == 0 {
		t.Fatal("no rejection published")
	}
	r := o.rejected[0]
	if !r.Rejection.Transient || r.Rejection.RetryAt.IsZero() || !slices.Contains(r.RequestIDs, ev.RequestID) {
		t.Fatalf("rejection: transient %v, retry at %v, requests %v", r.Rejection.Transient, r.Rejection.RetryAt, r.RequestIDs)
	}
	if len(o.rejected) >= 2 {
		gap1 := o.rejected[1].Rejection.RetryAt.Sub(o.rejected[0].Rejection.RetryAt)
		if gap1 < time.Second {
			t.Fatalf("retries %s apart, want a growing wait", gap1)
		}
	}
	e.sim.ClearFaults()
	testkit.Eventually(t, time.Minute, "the retried plan to apply", func() bool {
		o = e.events(ev.EventID)
		return len(o.finished) > 0
	})
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded || !e.sim.Exists(101) {
		t.Fatalf("retried run: %s; guest exists %v", f.Outcome, e.sim.Exists(101))
	}
	ctl, err := planner.Control(ctx, e.bus, cluster)
	if err != nil || !ctl.RetryAt.IsZero() || ctl.RetryAttempt != 0 || ctl.Pending() {
		t.Fatalf("control state after the apply: %+v, %v", ctl, err)
	}
}

// A plan rejected because PVE refuses the credentials names the node and PVE's answer, and is not retried:
// the event is handled, and no retry waits.
func TestRefusedCredentialsAreNotRetried(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	for _, n := range []string{"pve1", "pve2", "pve3"} {
		e.startExecutor(cluster, n, e.connect(), func(c *executor.Config) { c.PVE.TokenSecret = "00000000-0000-0000-0000-000000000000" })
	}
	e.startPlanner(e.plannerConfig("a"))
	ev := e.announce(e.vms(map[string]int{"web-01": 101}), false)
	o := e.wait(ev, time.Minute)
	if len(o.rejected) != 1 {
		t.Fatalf("want one rejection, got %+v", o)
	}
	r := o.rejected[0].Rejection
	if r.Transient || !r.RetryAt.IsZero() || r.Reason != plan.RejectObserve {
		t.Fatalf("rejection: %s, transient %v, retry at %v", r.Reason, r.Transient, r.RetryAt)
	}
	msg := r.Diagnostics[0].Message
	if !strings.Contains(msg, "node pve1") || !strings.Contains(msg, "GET /version") || !strings.Contains(msg, "401 Authentication failed") {
		t.Fatalf("diagnostic %q does not name the node and PVE's answer", msg)
	}
	ctl, err := planner.Control(testContext(t), e.bus, cluster)
	if err != nil || ctl.Pending() || !ctl.RetryAt.IsZero() || ctl.RetryAttempt != 0 {
		t.Fatalf("control state after a permanent rejection: %+v, %v", ctl, err)
	}
}

// When no executor serves a node, the rejection says so, names the node, and is retried: the executor may
// be starting.
func TestMissingExecutorIsNamedAndRetried(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	ev := e.announce(e.vms(map[string]int{"web-01": 101}), false)
	o := e.wait(ev, time.Minute)
	if len(o.rejected) == 0 {
		t.Fatalf("want a rejection, got %+v", o)
	}
	r := o.rejected[0].Rejection
	msg := r.Diagnostics[0].Message
	if !r.Transient || !strings.Contains(msg, "no executor of node pve2 is running") || strings.Contains(msg, "no responders") {
		t.Fatalf("rejection (transient %v): %q", r.Transient, msg)
	}
	e.startExecutors("pve2")
	testkit.Eventually(t, time.Minute, "the retried plan to apply once the executor runs", func() bool {
		o = e.events(ev.EventID)
		return len(o.finished) > 0
	})
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded {
		t.Fatalf("retried run: %s", f.Outcome)
	}
}
