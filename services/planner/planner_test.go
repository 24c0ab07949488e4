package planner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
)

// A repository event is planned against a fresh observe, run through the executors in dependency order,
// and finished; every created guest is recorded as owned with the identity its result reports. The next
// event on the unchanged repository plans nothing.
func TestApplyCreatesGuestsAndRecordsTheirIdentity(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101, "web-02": 102, "db-01": 103})
	o := e.apply(files)
	if f := o.last(); f.Succeeded != 3 || f.Failed != 0 {
		t.Fatalf("run: %+v", f.Finished)
	}
	for _, vmid := range []int{101, 102, 103} {
		if !e.sim.Exists(vmid) {
			t.Fatalf("guest %d not created", vmid)
		}
	}
	owned := e.owned()
	if len(owned) != 3 {
		t.Fatalf("owned records: %+v", owned)
	}
	for vmid, o := range owned {
		cfg, _ := e.sim.Config(vmid)
		if !strings.HasPrefix(o.Fingerprint, "uuid=") || !strings.Contains(strings.ToLower(cfg["smbios1"]), strings.TrimPrefix(o.Fingerprint, "uuid=")) {
			t.Fatalf("record of %d: fingerprint %q, live smbios1 %q", vmid, o.Fingerprint, cfg["smbios1"])
		}
	}
	creates := e.creates()
	again := e.apply(files)
	if n := len(again.planned[0].Plan.Operations); n != 0 {
		t.Fatalf("converged repository planned %d operations: %+v", n, again.planned[0].Plan.Operations)
	}
	if e.creates() != creates {
		t.Fatal("a converged plan created guests")
	}
}

// A repository with an error is rejected with every diagnostic, and nothing reaches PVE but reads.
func TestBrokenRepositoryIsRejectedWithEveryDiagnosticAndWritesNothing(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101, "web-02": 101})
	files["vm/lab/web-03.yaml"] = vm("web-03", 103, "pve9")
	files["clusters/lab/resources.yaml"] += "  - ../../vm/lab/web-03.yaml\n"
	ev := e.announce(files, false)
	o := e.wait(ev, time.Minute)
	if len(o.rejected) != 1 || len(o.planned) != 0 {
		t.Fatalf("want one rejection and no plan, got %+v", o)
	}
	r := o.rejected[0].Rejection
	text := r.Diagnostics.Error()
	if r.Reason != plan.RejectParse || !strings.Contains(text, "101") || !strings.Contains(text, "pve9") {
		t.Fatalf("rejection %s:\n%s", r.Reason, text)
	}
	if n := e.writes(); n != 0 {
		t.Fatalf("%d writes reached PVE", n)
	}
}
