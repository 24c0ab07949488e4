package pipeline_test

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// movingVM is a running VM on shared or node-local storage.
func movingVM(name string, vmid int, node, storage string) string {
	return fmt.Sprintf(`apiVersion: proxops/v1alpha1
kind: VM
metadata: {name: %s}
spec:
  node: %s
  vmid: %d
  memory: 512MiB
  cpu: {type: host, cores: 1}
  disks:
    - {storage: %s, size: 4GiB}
  networks:
    - {bridge: vmbr0}
`, name, node, vmid, storage)
}

// fleet is a repository of n VMs (vmid 300+i), the i-th on node pve<(i+shift)%3+1>, every other one on
// shared storage; the process configuration lets one plan move all of them.
func (e *env) fleet(n, shift int) repoFiles {
	files := repoFiles{"clusters/lab/config.yaml": e.lab(""),
		"proxops.yaml": "reconcile:\n  max-migrations: 0\n  migration-concurrency: 3\n"}
	var list []string
	for i := range n {
		name := fmt.Sprintf("m%02d", i)
		storage := "ceph"
		if i%2 == 1 {
			storage = "local-lvm"
		}
		files["vm/lab/"+name+".yaml"] = movingVM(name, 300+i, fmt.Sprintf("pve%d", (i+shift)%3+1), storage)
		list = append(list, "  - ../../vm/lab/"+name+".yaml")
	}
	files["clusters/lab/resources.yaml"] = "resources:\n" + strings.Join(list, "\n") + "\n"
	return files
}

var reMigratePath = regexp.MustCompile(`^/nodes/[^/]+/qemu/(\d+)/migrate$`)

// A commit moves 20 running guests between three nodes; the planner driving the run is killed in the middle
// and a new one takes the run over. Every guest is migrated exactly once (the simulator's request log), each
// ends on its new node, the ownership records learn the new node, and the next plan is empty.
func TestMovesSurviveAPlannerKilledMidRun(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "ceph", Type: "rbd", Content: []string{"images", "rootdir"}, Shared: true})
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmigrate": pvesim.Duration(250 * time.Millisecond)}
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	const n = 20
	a := e.startPlannerProcess("a")
	e.apply(e.fleet(n, 0))

	moved := e.fleet(n, 1)
	ev := e.announce(moved, false)
	migrations := func() int { return e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/migrate") }
	testkit.Eventually(t, time.Minute, "planner a to start some migrations", func() bool { return migrations() >= 4 })
	a.kill(t)
	e.startPlannerProcess("b")
	o := e.wait(ev, 2*time.Minute)
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != n {
		t.Fatalf("run after the takeover: %+v", f)
	}

	perGuest := map[string]int{}
	for _, r := range e.sim.Requests() {
		if m := reMigratePath.FindStringSubmatch(r.Path); m != nil && r.Method == "POST" && r.Status == 200 {
			perGuest[m[1]]++
		}
	}
	if len(perGuest) != n {
		t.Fatalf("%d guests migrated, want %d: %v", len(perGuest), n, perGuest)
	}
	for vmid, c := range perGuest {
		if c != 1 {
			t.Errorf("vmid %s migrated %d times", vmid, c)
		}
	}
	owned := e.owned()
	for i := range n {
		vmid, want := 300+i, fmt.Sprintf("pve%d", (i+1)%3+1)
		if node, _, ok := e.sim.NodeOf(vmid); !ok || node != want {
			t.Errorf("vmid %d on %q, want %s", vmid, node, want)
		}
		if !e.sim.Running(vmid) {
			t.Errorf("vmid %d stopped by its move", vmid)
		}
		if o := owned[vmid]; o.Node != want || o.AppliedNode != want {
			t.Errorf("vmid %d recorded on %q (applied %q), want %s", vmid, o.Node, o.AppliedNode, want)
		}
	}
	next := e.apply(moved)
	if ops := next.planned[0].Plan.Operations; len(ops) != 0 {
		t.Fatalf("the next plan has %d operations: %+v", len(ops), ops)
	}
}

// A guest moved by hand is reported as misplaced and left where it is by an ordinary apply; an apply with
// move-misplaced moves it back once, and the next ordinary plan is empty.
func TestMoveMisplacedMovesAHandMovedGuestBackOnce(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "ceph", Type: "rbd", Content: []string{"images", "rootdir"}, Shared: true})
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := repoFiles{"clusters/lab/config.yaml": e.lab(""), "vm/lab/app.yaml": movingVM("app", 300, "pve1", "ceph"),
		"clusters/lab/resources.yaml": "resources:\n  - ../../vm/lab/app.yaml\n"}
	e.apply(files)
	e.handMove("pve1", 300, "pve2")
	migrations := func() int { return e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/migrate") }
	before := migrations()

	o := e.apply(files)
	p := o.planned[0].Plan
	if len(p.Operations) != 0 || !slices.ContainsFunc(p.Findings, func(f plan.Finding) bool { return f.Kind == plan.FindingMisplaced }) {
		t.Fatalf("an ordinary apply planned %+v with findings %+v, want only the misplaced report", p.Operations, p.Findings)
	}
	if n, _, _ := e.sim.NodeOf(300); n != "pve2" || migrations() != before {
		t.Fatalf("an ordinary apply moved the guest: on %s, %d migrations", n, migrations()-before)
	}

	ev := e.announce(files, false, func(ev *event.RepoChanged) { ev.MoveMisplaced = true })
	if f := e.wait(ev, time.Minute).last(); f.Outcome != plan.OutcomeSucceeded {
		t.Fatalf("move-misplaced run: %+v", f)
	}
	if n, _, _ := e.sim.NodeOf(300); n != "pve1" || !e.sim.Running(300) {
		t.Fatalf("after move-misplaced the guest is on %s (running %v), want running on pve1", n, e.sim.Running(300))
	}
	if got := migrations() - before; got != 1 {
		t.Fatalf("%d migrations, want 1", got)
	}
	if ops := e.apply(files).planned[0].Plan.Operations; len(ops) != 0 {
		t.Fatalf("the next plan has %d operations: %+v", len(ops), ops)
	}
}

// An HA-managed guest whose spec.node changes is not moved while a strict HA rule keeps it off the new node:
// the planner reads the rules (and asks PVE about the move) and reports the conflict. Once the rule allows
// the node, the guest moves through HA, never directly, and the next plan, with nothing to move, asks PVE
// nothing about moves.
func TestHAGuestMovesThroughHAOnceItsRulesAgree(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "ceph", Type: "rbd", Content: []string{"images", "rootdir"}, Shared: true})
	spec.HADelay = pvesim.Duration(50 * time.Millisecond)
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := func(node string) repoFiles {
		return repoFiles{"clusters/lab/config.yaml": e.lab(""), "vm/lab/app.yaml": movingVM("app", 300, node, "ceph"),
			"clusters/lab/resources.yaml": "resources:\n  - ../../vm/lab/app.yaml\n"}
	}
	e.apply(files("pve1"))
	if err := e.sim.SetHA(300, true); err != nil {
		t.Fatal(err)
	}
	e.post("/cluster/ha/rules", url.Values{"rule": {"keep"}, "type": {"node-affinity"}, "resources": {"vm:300"},
		"nodes": {"pve1,pve3"}, "strict": {"1"}})
	asked := func() int { return e.sim.Count("GET", "/nodes/{node}/qemu/{vmid}/migrate") }
	haMoves := func() int { return e.sim.Count("POST", "/cluster/ha/resources/{sid}/migrate") }
	direct := func() int { return e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/migrate") }

	p := e.apply(files("pve2")).planned[0].Plan
	if len(p.Operations) != 0 || !slices.ContainsFunc(p.Findings, func(f plan.Finding) bool {
		return f.Kind == plan.FindingAnomaly && strings.Contains(f.Message, "HA rule keep")
	}) {
		t.Fatalf("with the rule: operations %+v, findings %+v; want only the conflict", p.Operations, p.Findings)
	}
	if asked() == 0 {
		t.Fatal("the planner did not ask PVE about the move")
	}

	e.send("PUT", "/cluster/ha/rules/keep", url.Values{"type": {"node-affinity"}, "nodes": {"pve1,pve2,pve3"}})
	e.apply(files("pve2"))
	if n, _, _ := e.sim.NodeOf(300); n != "pve2" || !e.sim.Running(300) {
		t.Fatalf("after the move: on %s, running %v", n, e.sim.Running(300))
	}
	if haMoves() != 1 || direct() != 0 {
		t.Fatalf("%d HA migrations and %d direct ones, want 1 and 0", haMoves(), direct())
	}
	before := asked()
	if ops := e.apply(files("pve2")).planned[0].Plan.Operations; len(ops) != 0 {
		t.Fatalf("the next plan has %d operations: %+v", len(ops), ops)
	}
	if asked() != before {
		t.Fatalf("a plan without moves asked PVE about %d moves", asked()-before)
	}
}

// PVE does not migrate a running VM's local disk that a snapshot holds. A VM on node-local storage carrying
// ProxOps' own safety snapshot (from a restart) moves: the run removes the snapshot on the source first, then
// migrates. A snapshot taken by hand blocks the next move: the plan names it, nothing is migrated, and the
// snapshot stays.
func TestOwnSnapshotIsRemovedBeforeALocalDiskMoveAndAHandTakenOneBlocksIt(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := repoFiles{"clusters/lab/config.yaml": e.lab(""), "vm/lab/app.yaml": movingVM("app", 300, "pve1", "local-lvm"),
		"clusters/lab/resources.yaml": "resources:\n  - ../../vm/lab/app.yaml\n"}
	e.apply(files)
	files["vm/lab/app.yaml"] = strings.Replace(files["vm/lab/app.yaml"], "memory: 512MiB", "memory: 1GiB", 1)
	restarted := e.apply(files)
	own := plan.SnapshotName(restarted.planned[0].PlanID)
	if raw, _ := e.sim.RawConfig(300); !strings.Contains(raw, "["+own+"]") {
		t.Fatalf("setup: no safety snapshot %s:\n%s", own, raw)
	}
	migrations := func() int { return e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/migrate") }

	files["vm/lab/app.yaml"] = strings.Replace(files["vm/lab/app.yaml"], "node: pve1", "node: pve2", 1)
	moved := e.apply(files)
	ops := moved.planned[0].Plan.Operations
	if len(ops) != 2 || ops[0].Action != plan.ActionDeleteSnapshot || ops[1].Action != plan.ActionMigrate || ops[0].Node != "pve1" {
		t.Fatalf("the move's plan: %+v", ops)
	}
	if n, _, _ := e.sim.NodeOf(300); n != "pve2" || !e.sim.Running(300) || migrations() != 1 {
		t.Fatalf("after the move: on %s (running %v), %d migrations", n, e.sim.Running(300), migrations())
	}
	if raw, _ := e.sim.RawConfig(300); strings.Contains(raw, "["+own+"]") {
		t.Fatalf("the own snapshot survived the move:\n%s", raw)
	}

	e.post("/nodes/pve2/qemu/300/snapshot", url.Values{"snapname": {"by-hand"}})
	testkit.Eventually(t, 30*time.Second, "the snapshot taken by hand", func() bool {
		raw, _ := e.sim.RawConfig(300)
		cfg, _ := e.sim.Config(300)
		return strings.Contains(raw, "[by-hand]") && cfg["lock"] == ""
	})
	files["vm/lab/app.yaml"] = strings.Replace(files["vm/lab/app.yaml"], "node: pve2", "node: pve3", 1)
	blocked := e.apply(files).planned[0].Plan
	if len(blocked.Operations) != 0 || !slices.ContainsFunc(blocked.Findings, func(f plan.Finding) bool {
		return f.Kind == plan.FindingAnomaly && strings.Contains(f.Message, "snapshots ProxOps did not take (by-hand)")
	}) {
		t.Fatalf("the blocked move planned %+v with findings %+v", blocked.Operations, blocked.Findings)
	}
	if n, _, _ := e.sim.NodeOf(300); n != "pve2" || migrations() != 1 {
		t.Fatalf("a blocked move moved the guest: on %s, %d migrations", n, migrations())
	}
	if raw, _ := e.sim.RawConfig(300); !strings.Contains(raw, "[by-hand]") {
		t.Fatalf("the snapshot taken by hand is gone:\n%s", raw)
	}
}
