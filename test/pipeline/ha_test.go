package pipeline_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
)

// objectRecorded reports whether the ownership inventory holds a record of a cluster object.
func (e *env) objectRecorded(kind, id string) bool {
	e.t.Helper()
	key, err := bus.ObjectOwnedKey(cluster, bus.ObjectKind(kind), id)
	if err != nil {
		e.t.Fatal(err)
	}
	_, _, err = e.bus.GetBytes(testContext(e.t), bus.BucketOwned, key)
	if errors.Is(err, bus.ErrNotFound) {
		return false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return true
}

// A guest with spec.ha and an HA rule naming it converge on the simulator in one run: the guest is created,
// made an HA resource, and started by HA (the run ends only once it runs), the resource and the rule carry
// the marker and are recorded, and the next plan is empty. A change that needs a restart restarts it through
// HA; stopping it in git stops it through HA, never with a stop of the plan's own; dropping spec.ha and the
// rule from git deletes both.
func TestAGuestWithSpecHAIsStartedThroughHAAndConverges(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.HADelay = pvesim.Duration(200 * time.Millisecond)
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))

	withHA := func(state string) repoFiles {
		files := e.vms(map[string]int{"web-01": 101})
		files["vm/lab/web-01.yaml"] += "  ha:\n    state: " + state + "\n    max-restart: 2\n    comment: front end\n"
		files["ha/lab/web.yaml"] = "apiVersion: proxops/v1alpha1\nkind: HARule\nmetadata: {name: web-prefers-pve1}\nspec:\n" +
			"  type: node-affinity\n  resources: [web-01]\n  nodes: [{node: pve1, priority: 2}, {node: pve2}]\n"
		files["clusters/lab/resources.yaml"] += "  - ../../ha/lab/web.yaml\n"
		return files
	}
	o := e.apply(withHA("started"))
	var actions []plan.Action
	for _, op := range o.planned[0].Plan.Operations {
		actions = append(actions, op.Action)
	}
	if !slices.Equal(actions, []plan.Action{plan.ActionCreate, plan.ActionCreateHAResource, plan.ActionCreateHARule}) {
		t.Fatalf("actions %v; want create, create-ha-resource, create-ha-rule (HA starts the guest)", actions)
	}
	if !e.sim.Running(101) {
		t.Fatal("the run ended before HA started the guest")
	}
	if n := e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/status/start"); n != 0 {
		t.Fatalf("%d starts of the plan's own; HA starts a guest it manages", n)
	}
	if r := e.sim.HAResource("vm:101"); r["comment"] != "front end [proxops]" || r["max_restart"] != "2" {
		t.Fatalf("HA resource vm:101 on PVE: %v", r)
	}
	if !e.objectRecorded(manifest.ObjectKindHAResource, "vm:101") || !e.objectRecorded("harule", "web-prefers-pve1") {
		t.Fatal("the HA resource or the HA rule has no ownership record")
	}
	again := e.wait(e.announce(withHA("started"), true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", again.planned[0].Plan.Operations)
	}

	// A change that needs a restart restarts the guest through HA (PVE hands the shutdown and the start to
	// it): the config is written only once HA has stopped the guest, and the run ends with it running.
	bigger := withHA("started")
	bigger["vm/lab/web-01.yaml"] = strings.Replace(bigger["vm/lab/web-01.yaml"], "memory: 512MiB", "memory: 1GiB", 1)
	o = e.apply(bigger)
	actions = nil
	for _, op := range o.planned[0].Plan.Operations {
		actions = append(actions, op.Action)
	}
	if !slices.Equal(actions, []plan.Action{plan.ActionSnapshot, plan.ActionShutdown, plan.ActionConfigure, plan.ActionStart}) {
		t.Fatalf("actions %v; want the safety snapshot, shutdown, configure, start (a restart, through HA)", actions)
	}
	if !e.sim.Running(101) {
		t.Fatal("the guest is not running after its restart through HA")
	}
	again = e.wait(e.announce(bigger, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("after the restart through HA the plan is not empty: %+v", again.planned[0].Plan.Operations)
	}

	powerRequests := func() int {
		return e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/status/stop") + e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown")
	}
	before := powerRequests()
	stopped := withHA("stopped")
	stopped["vm/lab/web-01.yaml"] = strings.Replace(stopped["vm/lab/web-01.yaml"], "memory: 512MiB", "memory: 1GiB", 1)
	o = e.apply(stopped)
	ops := o.planned[0].Plan.Operations
	if len(ops) != 1 || ops[0].Action != plan.ActionConfigureHAResource {
		t.Fatalf("operations %+v; want one configure-ha-resource", ops)
	}
	if e.sim.Running(101) {
		t.Fatal("the run ended before HA stopped the guest")
	}
	if n := powerRequests() - before; n != 0 {
		t.Fatalf("%d stop or shutdown requests of the plan's own; HA stops a guest it manages", n)
	}

	plain := e.vms(map[string]int{"web-01": 101})
	plain["vm/lab/web-01.yaml"] = strings.Replace(plain["vm/lab/web-01.yaml"], "  memory: 512MiB", "  state: stopped\n  memory: 1GiB", 1)
	o = e.apply(plain)
	actions = nil
	for _, op := range o.planned[0].Plan.Operations {
		actions = append(actions, op.Action)
	}
	if !slices.Equal(actions, []plan.Action{plan.ActionDeleteHARule, plan.ActionDeleteHAResource}) {
		t.Fatalf("actions %v; want delete-ha-rule, delete-ha-resource", actions)
	}
	if e.objectRecorded(manifest.ObjectKindHAResource, "vm:101") || e.objectRecorded("harule", "web-prefers-pve1") {
		t.Fatal("the records of the deleted HA objects are kept")
	}
	again = e.wait(e.announce(plain, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the plan after the prune is not empty: %+v", again.planned[0].Plan.Operations)
	}
}

// A pruned guest takes its HA resource with it (PVE's purge removes it), and the planner forgets the
// resource's ownership record with the guest's.
func TestAPrunedHAGuestLeavesNoHAResourceRecord(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.HADelay = pvesim.Duration(100 * time.Millisecond)
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))

	files := e.vms(map[string]int{"web-01": 101, "web-02": 102})
	files["vm/lab/web-01.yaml"] += "  ha:\n    state: started\n"
	e.apply(files)
	if !e.objectRecorded(manifest.ObjectKindHAResource, "vm:101") {
		t.Fatal("the HA resource of web-01 has no ownership record")
	}

	o := e.apply(e.vms(map[string]int{"web-02": 102}))
	var actions []plan.Action
	for _, op := range o.planned[0].Plan.Operations {
		actions = append(actions, op.Action)
	}
	if !slices.Contains(actions, plan.ActionDelete) || slices.Contains(actions, plan.ActionDeleteHAResource) {
		t.Fatalf("actions %v; want the guest's delete, which takes its HA resource along", actions)
	}
	if e.sim.Exists(101) || len(e.sim.HAResource("vm:101")) != 0 {
		t.Fatalf("web-01 or its HA resource is still on PVE: %v", e.sim.HAResource("vm:101"))
	}
	if e.objectRecorded(manifest.ObjectKindHAResource, "vm:101") {
		t.Fatal("the record of the pruned guest's HA resource is kept")
	}
}
