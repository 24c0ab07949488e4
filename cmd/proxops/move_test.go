package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// A guest moved by hand is only reported by diff and apply: the diff holds the finding and no operation,
// and apply (printing its plan with --diff) moves nothing. With --move-misplaced, diff shows the migration back to the manifest's node and apply runs it
// once; the diff that follows is empty.
func TestMoveMisplacedOnDiffAndApplyMovesAHandMovedGuestBack(t *testing.T) {
	e := newDemoEnv(t)
	e.mustRun(0, "apply")
	e.handMove("pve2", 102, "pve3")
	migrations := func() int { return e.sim.Count(http.MethodPost, "/nodes/{node}/qemu/{vmid}/migrate") }
	before := migrations()

	report := e.mustRun(2, "diff", "--exit-code")
	if !strings.Contains(report, "misplaced (on another node)") || !strings.Contains(report, "found on node pve3, the manifest places it on pve2") ||
		!strings.Contains(report, "proxops apply --move-misplaced moves it back") || strings.Contains(report, "pve3 → pve2") {
		t.Fatalf("diff without --move-misplaced:\n%s", report)
	}
	out := e.mustRun(0, "apply", "--diff")
	if !strings.Contains(out, "found on node pve3") || strings.Contains(out, "pve3 → pve2") {
		t.Fatalf("apply without --move-misplaced does not report the guest:\n%s", out)
	}
	if node, _, _ := e.sim.NodeOf(102); node != "pve3" || migrations() != before {
		t.Fatalf("an ordinary apply moved the guest: on %s, %d migrations", node, migrations()-before)
	}

	move := e.mustRun(2, "diff", "--exit-code", "--move-misplaced")
	if !strings.Contains(move, "will move (1)") ||
		!strings.Contains(move, "VM/web-02: spec.node pve3 → pve2; will migrate online, copying its local disks") {
		t.Fatalf("diff --move-misplaced:\n%s", move)
	}
	if node, _, _ := e.sim.NodeOf(102); node != "pve3" || migrations() != before {
		t.Fatalf("diff moved the guest: on %s, %d migrations", node, migrations()-before)
	}
	out = e.mustRun(0, "apply", "--move-misplaced")
	if !strings.Contains(out, "VM/web-02") || !strings.Contains(out, "0 failed") {
		t.Fatalf("apply --move-misplaced:\n%s", out)
	}
	if node, _, _ := e.sim.NodeOf(102); node != "pve2" || !e.sim.Running(102) {
		t.Fatalf("after apply --move-misplaced the guest is on %s (running %v), want running on pve2", node, e.sim.Running(102))
	}
	if got := migrations() - before; got != 1 {
		t.Fatalf("%d migrations, want 1", got)
	}
	if out := e.mustRun(0, "diff", "--exit-code"); !strings.Contains(out, "no drift") {
		t.Fatalf("diff after the move back:\n%s", out)
	}
}

// fleetVM is a VM of the moving fleet: vmid 300+i on node, on shared or node-local storage.
func fleetVM(i int, node string) string {
	storage := "ceph"
	if i%2 == 1 {
		storage = "local-lvm"
	}
	return fmt.Sprintf(`apiVersion: proxops/v1alpha1
kind: VM
metadata: {name: m%02d}
spec:
  node: %s
  vmid: %d
  memory: 512MiB
  cpu: {type: host, cores: 1}
  disks:
    - {storage: %s, size: 4GiB}
  networks:
    - {bridge: vmbr0}
`, i, node, 300+i, storage)
}

// writeFleet writes the n VMs of the fleet, the i-th on node pve<(i+shift)%3+1>, and lists them in the demo
// cluster's resources once.
func (e *demoEnv) writeFleet(n, shift int) {
	e.t.Helper()
	for i := range n {
		p := filepath.Join(e.repo, "vm", "demo", fmt.Sprintf("m%02d.yaml", i))
		if err := os.WriteFile(p, []byte(fleetVM(i, fmt.Sprintf("pve%d", (i+shift)%3+1))), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	e.edit("clusters/demo/resources.yaml", func(s string) string {
		for i := range n {
			line := fmt.Sprintf("  - ../../vm/demo/m%02d.yaml\n", i)
			if !strings.Contains(s, line) {
				s += line
			}
		}
		return s
	})
}

// A commit moves 20 running guests between three nodes; proxops up, killed with SIGKILL while the migrations
// run, is started again on the same data directory and carries the open run on. The simulator's request log shows
// every guest migrated exactly once, each runs on its new node, and the diff that follows is empty.
func TestUpKilledWhileMovingGuestsMigratesEachOnceOnRestart(t *testing.T) {
	e := newDemoEnvWith(t, func(spec *pvesim.Spec) {
		spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "ceph", Type: "rbd", Content: []string{"images", "rootdir"}, Shared: true})
		spec.TaskDurations["qmigrate"] = pvesim.Duration(400 * time.Millisecond)
	})
	const n = 20
	e.edit("proxops.yaml", func(s string) string {
		return strings.Replace(s, "reconcile:\n", "reconcile:\n  max-migrations: 0\n  migration-concurrency: 3\n", 1)
	})
	e.writeFleet(n, 0)
	e.commit("a fleet of 20 VMs")
	e.mustRun(0, "apply")
	e.writeFleet(n, 1)
	e.commit("move every VM of the fleet to the next node")

	migrations := func() int { return e.sim.Count(http.MethodPost, "/nodes/{node}/qemu/{vmid}/migrate") }
	first := e.startUpProcess()
	first.addr()
	testkit.Eventually(t, 2*time.Minute, "the first migrations", func() bool { return migrations() >= 4 })
	if err := first.process.Kill(); err != nil {
		t.Fatal(err)
	}
	first.wait()
	if m := migrations(); m >= n {
		t.Fatalf("the kill came after all %d migrations had been sent", m)
	}
	opened := logLines(first.errOut.String(), "plan published")
	if len(opened) != 1 {
		t.Fatalf("the killed up published %d plans\n%s", len(opened), first.errOut)
	}

	second := e.startUpProcess()
	waitConverged(t, second, second.addr(), "demo", e.head())
	if code := second.stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, second.errOut)
	}
	if carried := logLines(second.errOut.String(), "carrying on an open run"); len(carried) != 1 || carried[0]["run_id"] != opened[0]["run_id"] {
		t.Fatalf("run %v was not carried on: %v", opened[0]["run_id"], carried)
	}
	perGuest := map[string]int{}
	for _, r := range e.sim.Requests() {
		if r.Method == http.MethodPost && r.Template == "/nodes/{node}/qemu/{vmid}/migrate" && r.Status == http.StatusOK {
			perGuest[strings.Split(r.Path, "/")[4]]++
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
	for i := range n {
		vmid, want := 300+i, fmt.Sprintf("pve%d", (i+1)%3+1)
		if node, _, _ := e.sim.NodeOf(vmid); node != want || !e.sim.Running(vmid) {
			t.Errorf("vmid %d on %q (running %v), want running on %s", vmid, node, e.sim.Running(vmid), want)
		}
	}
	if out := e.mustRun(0, "diff", "--exit-code"); !strings.Contains(out, "no drift") {
		t.Fatalf("diff after the restart:\n%s", out)
	}
}
