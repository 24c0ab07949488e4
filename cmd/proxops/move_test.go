package main

import (
	"net/http"
	"strings"
	"testing"
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
