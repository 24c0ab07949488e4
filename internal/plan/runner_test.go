package plan_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/plan"
)

// testPlan: download an ISO, create VM 100 (needs the ISO), configure then start it; create VM 101 (needs
// the ISO); create VM 102 independently.
func testPlan() plan.Plan {
	return plan.Plan{ID: "p1", Cluster: "lab", Operations: []plan.Operation{
		{ID: "o1", Ref: "ISO/debian", Action: plan.ActionDownload, Node: "pve1"},
		{ID: "o2", Ref: "VM/web", VMID: 100, Action: plan.ActionCreate, DependsOn: []string{"o1"}},
		{ID: "o3", Ref: "VM/web", VMID: 100, Action: plan.ActionConfigure, DependsOn: []string{"o2"}},
		{ID: "o4", Ref: "VM/web", VMID: 100, Action: plan.ActionStart, DependsOn: []string{"o3"}},
		{ID: "o5", Ref: "VM/db", VMID: 101, Action: plan.ActionCreate, DependsOn: []string{"o1"}},
		{ID: "o6", Ref: "VM/cache", VMID: 102, Action: plan.ActionCreate},
	}}
}

func ids(ops []plan.Operation) []string {
	var out []string
	for _, op := range ops {
		out = append(out, op.ID)
	}
	return out
}

func mustRun(t *testing.T, p plan.Plan) *plan.Run {
	t.Helper()
	r, err := plan.NewRun(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func dispatchAll(t *testing.T, r *plan.Run) []string {
	t.Helper()
	ready := ids(r.Ready())
	for _, id := range ready {
		if err := r.Dispatched(id); err != nil {
			t.Fatal(err)
		}
	}
	return ready
}

func TestRunReleasesDependantsInOrder(t *testing.T) {
	r := mustRun(t, testPlan())
	if got := dispatchAll(t, r); !slices.Equal(got, []string{"o1", "o6"}) {
		t.Fatalf("first wave = %v", got)
	}
	if got := r.Ready(); len(got) != 0 {
		t.Fatalf("dispatched operations are ready again: %v", ids(got))
	}
	r.Observe(plan.Result{OpID: "o1", Status: plan.StatusSucceeded})
	if got := dispatchAll(t, r); !slices.Equal(got, []string{"o2", "o5"}) {
		t.Fatalf("second wave = %v", got)
	}
	for _, id := range []string{"o2", "o5", "o6"} {
		r.Observe(plan.Result{OpID: id, Status: plan.StatusSucceeded})
	}
	if got := dispatchAll(t, r); !slices.Equal(got, []string{"o3"}) {
		t.Fatalf("third wave = %v", got)
	}
	r.Observe(plan.Result{OpID: "o3", Status: plan.StatusSucceeded})
	dispatchAll(t, r)
	if r.Done() {
		t.Fatal("run is done with o4 in flight")
	}
	r.Observe(plan.Result{OpID: "o4", Status: plan.StatusSucceeded})
	if !r.Done() {
		t.Fatal("run is not done after every operation succeeded")
	}
	if f := r.Finished(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != 6 {
		t.Fatalf("Finished() = %+v", f)
	}
}

func TestRunSkipsTransitiveDependantsOfAFailure(t *testing.T) {
	r := mustRun(t, testPlan())
	dispatchAll(t, r)
	r.Observe(plan.Result{OpID: "o6", Status: plan.StatusSucceeded})
	r.Observe(plan.Result{OpID: "o1", Status: plan.StatusFailed, Message: "checksum mismatch"})
	if !r.Done() {
		t.Fatal("run is not done after its root failed")
	}
	f := r.Finished()
	got := map[string]plan.OpState{}
	for _, o := range f.Operations {
		got[o.ID] = o.State
	}
	want := map[string]plan.OpState{"o1": plan.OpFailed, "o2": plan.OpSkipped, "o3": plan.OpSkipped,
		"o4": plan.OpSkipped, "o5": plan.OpSkipped, "o6": plan.OpSucceeded}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("states (-want +got):\n%s", diff)
	}
	if f.Outcome != plan.OutcomeFailed || f.Failed != 1 || f.Skipped != 4 {
		t.Fatalf("Finished() = %+v", f)
	}
}

func TestRunKeepsOneOperationPerGuestInFlight(t *testing.T) {
	p := plan.Plan{ID: "p", Operations: []plan.Operation{
		{ID: "a", VMID: 100, Action: plan.ActionResize},
		{ID: "b", VMID: 100, Action: plan.ActionConfigure},
		{ID: "c", VMID: 101, Action: plan.ActionConfigure},
	}}
	r := mustRun(t, p)
	if got := dispatchAll(t, r); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("first wave = %v; want one operation per guest", got)
	}
	r.Observe(plan.Result{OpID: "a", Status: plan.StatusSucceeded})
	if got := dispatchAll(t, r); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("second wave = %v", got)
	}
}

func TestRunReloadedFromResultsNeverDispatchesTwice(t *testing.T) {
	// A planner that crashed after o1 succeeded and o2 started replays the results into a fresh run.
	r := mustRun(t, testPlan())
	results := []plan.Result{
		{OpID: "o1", Status: plan.StatusStarted},
		{OpID: "o6", Status: plan.StatusStarted},
		{OpID: "o1", Status: plan.StatusSucceeded},
		{OpID: "o2", Status: plan.StatusStarted},
		{OpID: "o2", Status: plan.StatusProgress},
		{OpID: "o1", Status: plan.StatusSucceeded}, // redelivered duplicate
	}
	for _, res := range results {
		r.Observe(res)
	}
	if got := ids(r.Ready()); !slices.Equal(got, []string{"o5"}) {
		t.Fatalf("ready after reload = %v; want only o5", got)
	}
	if got := r.InFlight(); !slices.Equal(got, []string{"o2", "o6"}) {
		t.Fatalf("in flight after reload = %v", got)
	}
	if r.Observe(plan.Result{OpID: "o1", Status: plan.StatusFailed}) {
		t.Fatal("a result after the final one changed the run")
	}
	if s, _ := r.State("o1"); s != plan.OpSucceeded {
		t.Fatalf("o1 state = %s", s)
	}
}

func TestRunSupersedeLetsInFlightOperationsFinish(t *testing.T) {
	r := mustRun(t, testPlan())
	dispatchAll(t, r) // o1 and o6 in flight
	r.Supersede()
	if r.Done() {
		t.Fatal("run is done with operations in flight")
	}
	if got := r.Ready(); len(got) != 0 {
		t.Fatalf("superseded run has ready operations: %v", ids(got))
	}
	r.Observe(plan.Result{OpID: "o1", Status: plan.StatusSucceeded})
	r.Observe(plan.Result{OpID: "o6", Status: plan.StatusSucceeded})
	if !r.Done() {
		t.Fatal("run not done after in-flight operations finished")
	}
	f := r.Finished()
	if f.Outcome != plan.OutcomeSuperseded || f.Succeeded != 2 || f.Superseded != 4 {
		t.Fatalf("Finished() = %+v", f)
	}
}

func TestNewRunRefusesBrokenDependencies(t *testing.T) {
	cases := map[string]plan.Plan{
		"unknown": {Operations: []plan.Operation{{ID: "a", DependsOn: []string{"zz"}}}},
		"forward": {Operations: []plan.Operation{{ID: "a", DependsOn: []string{"b"}}, {ID: "b"}}},
		"dup":     {Operations: []plan.Operation{{ID: "a"}, {ID: "a"}}},
	}
	for name, p := range cases {
		if _, err := plan.NewRun(p); err == nil {
			t.Errorf("%s: NewRun accepted a broken plan", name)
		}
	}
}

func TestEmptyPlanIsDoneAtOnce(t *testing.T) {
	r := mustRun(t, plan.Plan{ID: "empty"})
	if !r.Done() || r.Finished().Outcome != plan.OutcomeSucceeded {
		t.Fatal("an empty run is not done and succeeded")
	}
}

// isPrune reports whether an operation belongs to a prune: its resource is not declared in git.
func isPrune(p plan.Plan, op plan.Operation) bool {
	_, declared := slices.BinarySearch(p.Resources, op.Ref)
	return !declared
}

// checkPrunesWaitForEverything fails unless every prune operation depends, directly or through other
// operations, on every operation that is not a prune.
func checkPrunesWaitForEverything(t *testing.T, p plan.Plan) {
	t.Helper()
	index := map[string]int{}
	for i, op := range p.Operations {
		index[op.ID] = i
	}
	// before[i] is the set of operations i waits for, transitively; dependencies point backwards.
	before := make([]map[string]bool, len(p.Operations))
	for i, op := range p.Operations {
		before[i] = map[string]bool{}
		for _, dep := range op.DependsOn {
			before[i][dep] = true
			for id := range before[index[dep]] {
				before[i][id] = true
			}
		}
	}
	for i, op := range p.Operations {
		if !isPrune(p, op) {
			continue
		}
		for _, other := range p.Operations {
			if !isPrune(p, other) && !before[i][other.ID] {
				t.Errorf("prune operation %s does not wait for %s", op.ID, other.ID)
			}
		}
	}
}

func TestPrunesAreDispatchedOnlyAfterEveryOtherOperationSucceeded(t *testing.T) {
	c := loadCase(t, "testdata/cases/prune-after-creates-and-updates")
	p, err := plan.Diff(c.input)
	if err != nil {
		t.Fatal(err)
	}
	prunes, others := 0, 0
	for _, op := range p.Operations {
		if isPrune(p, op) {
			prunes++
		} else {
			others++
		}
	}
	if prunes < 2 || others < 2 {
		t.Fatalf("the case must mix prunes and other operations; got %d prune and %d other operations", prunes, others)
	}
	checkPrunesWaitForEverything(t, p)
	r := mustRun(t, p)
	var order []string
	for wave := 0; !r.Done(); wave++ {
		if wave > len(p.Operations) {
			t.Fatalf("the run does not finish; dispatched so far: %v", order)
		}
		ready := r.Ready()
		if len(ready) == 0 {
			t.Fatalf("nothing ready and the run is not done; dispatched so far: %v", order)
		}
		for _, op := range ready {
			if isPrune(p, op) {
				for _, other := range p.Operations {
					if s, _ := r.State(other.ID); !isPrune(p, other) && s != plan.OpSucceeded {
						t.Fatalf("prune %s dispatched while %s is %s", op.ID, other.ID, s)
					}
				}
			}
			if err := r.Dispatched(op.ID); err != nil {
				t.Fatal(err)
			}
			order = append(order, op.ID)
		}
		for _, op := range ready {
			r.Observe(plan.Result{OpID: op.ID, Status: plan.StatusSucceeded})
		}
	}
	if f := r.Finished(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != len(p.Operations) {
		t.Fatalf("Finished() = %+v; dispatch order %v", f, order)
	}
}

func TestAFailureAnywhereSkipsEveryPrune(t *testing.T) {
	c := loadCase(t, "testdata/cases/prune-after-creates-and-updates")
	p, err := plan.Diff(c.input)
	if err != nil {
		t.Fatal(err)
	}
	for _, failing := range p.Operations {
		if isPrune(p, failing) {
			continue
		}
		t.Run(failing.ID, func(t *testing.T) {
			r := mustRun(t, p)
			for !r.Done() {
				ready := r.Ready()
				if len(ready) == 0 {
					t.Fatal("nothing ready and the run is not done")
				}
				for _, op := range ready {
					if isPrune(p, op) {
						t.Fatalf("prune %s dispatched although %s failed", op.ID, failing.ID)
					}
					_ = r.Dispatched(op.ID)
					status := plan.StatusSucceeded
					if op.ID == failing.ID {
						status = plan.StatusFailed
					}
					r.Observe(plan.Result{OpID: op.ID, Status: status})
				}
			}
			for _, op := range p.Operations {
				if s, _ := r.State(op.ID); isPrune(p, op) && s != plan.OpSkipped {
					t.Errorf("prune %s is %s; want skipped", op.ID, s)
				}
			}
			if f := r.Finished(); f.Outcome != plan.OutcomeFailed {
				t.Fatalf("outcome = %s; want failed", f.Outcome)
			}
		})
	}
}
