package pipeline_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/planner"
)

// snapshotCounts reads proxops_planner_snapshots_total by event.
func snapshotCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "proxops_planner_snapshots_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				out[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// outcomeOf finds an operation's outcome in a finished run by action.
func outcomeOf(f plan.FinishedRun, action plan.Action) (plan.OpOutcome, bool) {
	for _, o := range f.Operations {
		if o.Action == action {
			return o, true
		}
	}
	return plan.OpOutcome{}, false
}

// A memory change needs a restart, so the run takes a safety snapshot first. When the start after the change
// fails, rollback: on-failure rolls the guest back to the snapshot and starts it again: it runs with its old
// memory, and the run reports the failure and the rollback. With rollback: never the snapshot is kept, and the
// failure says so.
func TestAFailedProtectedChangeIsRolledBackOrKept(t *testing.T) {
	for _, policy := range []string{"on-failure", "never"} {
		t.Run(policy, func(t *testing.T) {
			e := newEnv(t, pvesim.DefaultSpec())
			e.startExecutors("pve1", "pve2", "pve3")
			reg := prometheus.NewRegistry()
			cfg := e.plannerConfig("a")
			cfg.Registry = reg
			e.startPlanner(cfg)
			files := e.vms(map[string]int{"web-01": 101})
			files["proxops.yaml"] = "reconcile:\n  rollback: " + policy + "\n"
			e.apply(files)
			if !e.sim.Running(101) {
				t.Fatal("setup: web-01 does not run")
			}
			files["vm/lab/web-01.yaml"] = strings.Replace(files["vm/lab/web-01.yaml"], "memory: 512MiB", "memory: 1GiB", 1)
			if err := e.sim.SetFaults(pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmstart"}, TaskFailureMessage: "start failed: injected"}); err != nil {
				t.Fatal(err)
			}
			f := e.wait(e.announce(files, false), time.Minute).last()
			e.sim.ClearFaults()
			if f.Outcome != plan.OutcomeFailed {
				t.Fatalf("run: %s %+v", f.Outcome, f.Operations)
			}
			snap, _ := outcomeOf(f, plan.ActionSnapshot)
			start, _ := outcomeOf(f, plan.ActionStart)
			rb, rolledBack := outcomeOf(f, plan.ActionRollback)
			if snap.State != plan.OpSucceeded || start.State != plan.OpFailed {
				t.Fatalf("snapshot %s, start %s: %+v", snap.State, start.State, f.Operations)
			}
			raw, _ := e.sim.RawConfig(101)
			name := plan.SnapshotName(f.PlanID)
			if !strings.Contains(raw, "["+name+"]") {
				t.Fatalf("snapshot %s not kept:\n%s", name, raw)
			}
			counts := snapshotCounts(t, reg)
			if counts["taken"] != 1 || (policy == "on-failure") != (counts["rolled_back"] == 1) {
				t.Errorf("proxops_planner_snapshots_total: %v", counts)
			}
			switch policy {
			case "on-failure":
				if !rolledBack || rb.State != plan.OpSucceeded || !strings.Contains(start.Message, "rolling back to the safety snapshot "+name) {
					t.Fatalf("rollback %v %+v; start message %q", rolledBack, rb, start.Message)
				}
				if !strings.Contains(raw, "\nmemory: 512\n") || !e.sim.Running(101) {
					t.Fatalf("after the rollback (running %v):\n%s", e.sim.Running(101), raw)
				}
			case "never":
				if rolledBack || !strings.Contains(start.Message, "safety snapshot "+name+" taken before it is kept") {
					t.Fatalf("rollback %v; start message %q", rolledBack, start.Message)
				}
				if !strings.Contains(raw, "\nmemory: 1024\n") {
					t.Fatalf("the change was undone without rollback:\n%s", raw)
				}
			}
		})
	}
}

// An operator's rollback is planned, signed and run by the executors like any plan: the guest goes back to
// the newest safety snapshot and runs again, and proxops_planner_snapshots_total counts it rolled back.
// Afterwards the guest is suspended: a drift tick of the same tree, and a new commit that leaves its manifest
// as it is, plan nothing for it and report its drift; once resumed, the next plan corrects it. A rollback
// event that names no operator is rejected.
func TestAnOperatorsRollbackIsRunAndTheGuestLeftAloneUntilResumed(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	reg := prometheus.NewRegistry()
	cfg := e.plannerConfig("a")
	cfg.Registry = reg
	e.startPlanner(cfg)
	files := e.vms(map[string]int{"web-01": 101})
	e.apply(files)
	files["vm/lab/web-01.yaml"] = strings.Replace(files["vm/lab/web-01.yaml"], "memory: 512MiB", "memory: 1GiB", 1)
	e.apply(files)
	memory := func() string {
		cfg, _ := e.sim.Config(101)
		return cfg["memory"]
	}
	if memory() != "1024" {
		t.Fatalf("setup: memory %s", memory())
	}

	rollback := func(by string) func(*event.RepoChanged) {
		return func(ev *event.RepoChanged) { ev.Rollback, ev.RequestedBy = &event.Rollback{Guest: "web-01"}, by }
	}
	refused := e.announce(files, false, rollback(""))
	o := e.wait(refused, time.Minute)
	if len(o.rejected) != 1 || o.rejected[0].Rejection.Reason != plan.RejectRollback {
		t.Fatalf("a rollback naming no operator: %+v", o)
	}
	// A refused rollback does not hold the cluster's own plans back: a drift tick of the same commit is planned.
	o = e.wait(e.announce(files, false, func(ev *event.RepoChanged) {
		ev.Trigger, ev.RequestID, ev.Commit = event.TriggerDrift, "", refused.Commit
	}), 30*time.Second)
	if len(o.finished) != 1 || o.last().Outcome != plan.OutcomeSucceeded {
		t.Fatalf("the drift tick after a refused rollback: %+v", o)
	}
	o = e.wait(e.announce(files, false, rollback("alice")), time.Minute)
	f := o.last()
	rb, ok := outcomeOf(f, plan.ActionRollback)
	if f.Outcome != plan.OutcomeSucceeded || !ok || rb.State != plan.OpSucceeded || len(f.Operations) != 1 {
		t.Fatalf("rollback run: %s %+v", f.Outcome, f.Operations)
	}
	if memory() != "512" || !e.sim.Running(101) {
		t.Fatalf("after the rollback: memory %s, running %v", memory(), e.sim.Running(101))
	}
	if counts := snapshotCounts(t, reg); counts["rolled_back"] != 1 || counts["taken"] != 1 {
		t.Errorf("proxops_planner_snapshots_total: %v", counts)
	}

	for _, trigger := range []event.Trigger{event.TriggerDrift, event.TriggerPoll} {
		o = e.wait(e.announce(files, false, func(ev *event.RepoChanged) { ev.Trigger = trigger }), time.Minute)
		p := o.planned[0].Plan
		if len(p.Operations) != 0 || len(p.Findings) == 0 || p.Findings[0].Kind != plan.FindingSuspended ||
			!strings.Contains(p.Findings[0].Message, "rolled back to proxops-") || !strings.Contains(p.Findings[0].Message, "memory: 512 → 1024") {
			t.Fatalf("%s after the rollback: operations %v, findings %+v", trigger, p.Operations, p.Findings)
		}
		if memory() != "512" {
			t.Fatalf("%s undid the rollback: memory %s", trigger, memory())
		}
	}

	if _, ok, err := planner.ResumeGuest(testContext(t), e.bus, cluster, "web-01"); err != nil || !ok {
		t.Fatalf("resume: %v %v", ok, err)
	}
	e.apply(files)
	if memory() != "1024" {
		t.Fatalf("after resume: memory %s", memory())
	}
}

// Retention, end to end: a safety snapshot older than reconcile.snapshot-retention is deleted by the first
// plan that finds the guest converged, and counted pruned; a snapshot taken by hand is never deleted, even one
// named like ProxOps' own.
func TestRetentionDeletesOnlyProxOpsOwnExpiredSnapshots(t *testing.T) {
	spec := pvesim.DefaultSpec()
	// The simulator stamps snapshots with this time: a day and more before the planner's clock.
	spec.Clock = time.Now().Add(-48 * time.Hour).Truncate(time.Second)
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	reg := prometheus.NewRegistry()
	cfg := e.plannerConfig("a")
	cfg.Registry = reg
	e.startPlanner(cfg)
	files := e.vms(map[string]int{"web-01": 101})
	e.apply(files)
	files["vm/lab/web-01.yaml"] = strings.Replace(files["vm/lab/web-01.yaml"], "memory: 512MiB", "memory: 1GiB", 1)
	f := e.apply(files).last()
	own := plan.SnapshotName(f.PlanID)
	e.post("/nodes/pve1/qemu/101/snapshot", url.Values{"snapname": {"proxops-byhand"}})
	testkit.Eventually(t, 30*time.Second, "the hand-made snapshot", func() bool {
		raw, _ := e.sim.RawConfig(101)
		cfg, _ := e.sim.Config(101)
		return strings.Contains(raw, "[proxops-byhand]") && cfg["lock"] == ""
	})

	o := e.apply(files)
	var deleted []string
	for _, op := range o.planned[0].Plan.Operations {
		if op.Action == plan.ActionDeleteSnapshot {
			name, _ := op.Param(plan.SnapshotNameParam)
			deleted = append(deleted, name)
		}
	}
	if len(deleted) != 1 || deleted[0] != own {
		t.Fatalf("the converged plan deletes %v, want only %s", deleted, own)
	}
	raw, _ := e.sim.RawConfig(101)
	if strings.Contains(raw, "["+own+"]") || !strings.Contains(raw, "[proxops-byhand]") {
		t.Fatalf("after retention:\n%s", raw)
	}
	if counts := snapshotCounts(t, reg); counts["pruned"] != 1 {
		t.Errorf("proxops_planner_snapshots_total: %v", counts)
	}
	// The next plan has nothing left to delete.
	if o := e.apply(files); len(o.planned[0].Plan.Operations) != 0 {
		t.Fatalf("after the deletion: %v", o.planned[0].Plan.Operations)
	}
}
