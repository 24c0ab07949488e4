package plan_test

import (
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/plan"
)

// protectedPlan: a safety snapshot of VM 100, then a shutdown, a configure and a start that depend on it.
func protectedPlan(params ...plan.KV) plan.Plan {
	snap := plan.Operation{ID: "vm-100-snapshot", Ref: "VM/web", VMID: 100, Node: "pve1", Action: plan.ActionSnapshot,
		Params: append([]plan.KV{{Key: "description", Value: "restart"}}, params...)}
	return plan.Plan{ID: "p1", Cluster: "lab", Operations: []plan.Operation{
		snap,
		{ID: "vm-100-shutdown", Ref: "VM/web", VMID: 100, Action: plan.ActionShutdown, DependsOn: []string{"vm-100-snapshot"}},
		{ID: "vm-100-configure", Ref: "VM/web", VMID: 100, Action: plan.ActionConfigure, DependsOn: []string{"vm-100-shutdown"}},
		{ID: "vm-100-start", Ref: "VM/web", VMID: 100, Action: plan.ActionStart, DependsOn: []string{"vm-100-configure"}},
	}}
}

func feed(t *testing.T, r *plan.Run, id string, st plan.ResultStatus) {
	t.Helper()
	if err := r.Dispatched(id); err != nil {
		t.Fatal(err)
	}
	if !r.Observe(plan.Result{OpID: id, Status: st, Message: string(st)}) {
		t.Fatalf("result of %s changed nothing", id)
	}
}

// With rollback on failure, a failed protected change makes the run roll the guest back to its snapshot
// (named by the run, started again) and the run ends failed with both reported.
func TestRunRollsBackAFailedProtectedChange(t *testing.T) {
	r := mustRun(t, protectedPlan(plan.KV{Key: plan.RollbackParam, Value: plan.RollbackOnFailure}, plan.KV{Key: plan.StartParam, Value: "1"}))
	feed(t, r, "vm-100-snapshot", plan.StatusSucceeded)
	feed(t, r, "vm-100-shutdown", plan.StatusSucceeded)
	feed(t, r, "vm-100-configure", plan.StatusFailed)
	ready := r.Ready()
	if len(ready) != 1 || ready[0].Action != plan.ActionRollback {
		t.Fatalf("after the failure, ready: %v", ids(ready))
	}
	rb := ready[0].ForRun("71e385f001481cda", "abc")
	if name, _ := rb.Param(plan.SnapshotNameParam); name != plan.SnapshotName("71e385f001481cda") {
		t.Errorf("rollback to %q", name)
	}
	if start, _ := rb.Param(plan.StartParam); start != "1" {
		t.Errorf("rollback without start=1: %v", rb.Params)
	}
	feed(t, r, rb.ID, plan.StatusSucceeded)
	if !r.Done() {
		t.Fatal("the run is not done")
	}
	f := r.Finished()
	if f.Outcome != plan.OutcomeFailed || f.Failed != 1 || f.Skipped != 1 || f.Succeeded != 3 {
		t.Fatalf("finished: %+v", f)
	}
	if msg := f.Operations[2].Message; !strings.Contains(msg, "rolling back") {
		t.Errorf("the failure does not say it was rolled back: %q", msg)
	}
}

// Without rollback the snapshot is kept and the failure says so; a failure before the snapshot succeeded
// rolls nothing back.
func TestRunKeepsTheSnapshotWithoutRollback(t *testing.T) {
	r := mustRun(t, protectedPlan())
	feed(t, r, "vm-100-snapshot", plan.StatusSucceeded)
	feed(t, r, "vm-100-shutdown", plan.StatusFailed)
	if ready := r.Ready(); len(ready) != 0 || !r.Done() {
		t.Fatalf("ready after the failure: %v", ids(ready))
	}
	if msg := r.Finished().Operations[1].Message; !strings.Contains(msg, "snapshot taken before it is kept") {
		t.Errorf("the failure does not name the kept snapshot: %q", msg)
	}
	r = mustRun(t, protectedPlan(plan.KV{Key: plan.RollbackParam, Value: plan.RollbackOnFailure}))
	feed(t, r, "vm-100-snapshot", plan.StatusFailed)
	if ready := r.Ready(); len(ready) != 0 {
		t.Fatalf("a rollback after a failed snapshot: %v", ids(ready))
	}
}

// A run reloaded from its results after a crash adds the rollback again, once, and takes its result.
func TestRunReloadedAfterARollbackKnowsIt(t *testing.T) {
	p := protectedPlan(plan.KV{Key: plan.RollbackParam, Value: plan.RollbackOnFailure})
	results := []plan.Result{
		{OpID: "vm-100-snapshot", Status: plan.StatusSucceeded},
		{OpID: "vm-100-shutdown", Status: plan.StatusFailed},
		{OpID: "vm-100-snapshot-rollback", Status: plan.StatusSucceeded},
		{OpID: "vm-100-shutdown", Status: plan.StatusFailed},
	}
	r := mustRun(t, p)
	for _, res := range results {
		r.Observe(res)
	}
	if !r.Done() || len(r.Ready()) != 0 {
		t.Fatalf("reloaded run: done %v, ready %v", r.Done(), ids(r.Ready()))
	}
	if f := r.Finished(); len(f.Operations) != 5 || f.Operations[4].State != plan.OpSucceeded {
		t.Fatalf("reloaded run: %+v", f.Operations)
	}
}
