package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
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
