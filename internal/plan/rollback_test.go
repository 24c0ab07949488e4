package plan_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/render"
)

// retentionCase is a converged VM/app (vmid 100) with ProxOps' snapshots proxops-r1 to proxops-r4, a
// hand-made proxops-handmade that the inventory does not record, and a hand-made before-upgrade.
func retentionCase(t *testing.T) plan.Input {
	t.Helper()
	return loadCase(t, "testdata/cases/snapshot-retention-prunes").input
}

// An operator's rollback without a snapshot name goes to the newest of ProxOps' own snapshots (not to a newer
// hand-made one), whatever names the guest: its name, Kind/name or vmid. The plan is that one operation, and
// the same inputs give the same plan.
func TestARollbackGoesToTheNewestOwnSnapshot(t *testing.T) {
	in := retentionCase(t)
	var first plan.Plan
	for i, guest := range []string{"app", "VM/app", "100"} {
		p, err := plan.RollbackPlan(in, plan.RollbackRequest{Guest: guest, RequestedBy: "alice"})
		if err != nil {
			t.Fatalf("%s: %v", guest, err)
		}
		if len(p.Operations) != 1 {
			t.Fatalf("%s: %d operations", guest, len(p.Operations))
		}
		op := p.Operations[0]
		name, _ := op.Param(plan.SnapshotNameParam)
		by, _ := op.Param(plan.RequestedByParam)
		if op.Action != plan.ActionRollback || op.Ref != "VM/app" || op.VMID != 100 || op.Node != "pve1" || name != "proxops-r4" || by != "alice" {
			t.Fatalf("%s: %+v", guest, op)
		}
		if !strings.Contains(op.Reason, "as alice asked") {
			t.Errorf("%s: the reason does not say who asked: %q", guest, op.Reason)
		}
		if i == 0 {
			first = p
		} else if diff := cmp.Diff(first, p); diff != "" {
			t.Errorf("%s plans otherwise than app:\n%s", guest, diff)
		}
	}
	if _, err := plan.NewRun(first); err != nil {
		t.Fatalf("the rollback plan cannot run: %v", err)
	}
	if text := render.PlanText(first); !strings.Contains(text, "=== safety snapshots (1) ===") || !strings.Contains(text, "rollback     VM/app") {
		t.Errorf("diff does not show the rollback in the snapshot section:\n%s", text)
	}
}

// A rollback to a named snapshot goes there when it is ProxOps' own, and is refused, with why, when ProxOps
// did not take it (a hand-made one, even named proxops-…), when it does not exist, and when the guest is not
// found.
func TestARollbackRefusesWhatProxOpsDidNotTake(t *testing.T) {
	in := retentionCase(t)
	p, err := plan.RollbackPlan(in, plan.RollbackRequest{Guest: "app", Snapshot: "proxops-r2", RequestedBy: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if name, _ := p.Operations[0].Param(plan.SnapshotNameParam); name != "proxops-r2" {
		t.Fatalf("rollback to %s, want proxops-r2", name)
	}
	for _, c := range []struct{ guest, snapshot, want string }{
		{"app", "proxops-handmade", "snapshot proxops-handmade of VM/app (vmid 100) was not taken by ProxOps (the ownership inventory holds no record of it"},
		{"app", "before-upgrade", "snapshot before-upgrade of VM/app (vmid 100) was not taken by ProxOps (its name does not start with proxops-)"},
		{"app", "proxops-gone", "VM/app (vmid 100) has no snapshot proxops-gone (ProxOps' own: proxops-r1, proxops-r2, proxops-r3, proxops-r4)"},
		{"ghost", "", `no guest "ghost" in cluster lab`},
	} {
		_, err := plan.RollbackPlan(in, plan.RollbackRequest{Guest: c.guest, Snapshot: c.snapshot, RequestedBy: "alice"})
		var rej *plan.RejectedError
		if !errors.As(err, &rej) || rej.Rejection.Reason != plan.RejectRollback || len(rej.Rejection.Diagnostics) != 1 {
			t.Fatalf("%s %s: %v", c.guest, c.snapshot, err)
		}
		if msg := rej.Rejection.Diagnostics[0].Message; !strings.Contains(msg, c.want) {
			t.Errorf("%s %s: %q, want it to say %q", c.guest, c.snapshot, msg, c.want)
		}
		if text := render.RejectionText(rej.Rejection); !strings.Contains(text, "rollback refused") {
			t.Errorf("the rejection does not say the rollback was refused:\n%s", text)
		}
	}
}

// A guest without a snapshot of ProxOps' own cannot be rolled back without naming one, and the refusal lists
// the snapshots PVE has.
func TestARollbackOfAGuestWithoutOwnSnapshotsIsRefused(t *testing.T) {
	in := retentionCase(t)
	in.SnapshotRecords = nil
	_, err := plan.RollbackPlan(in, plan.RollbackRequest{Guest: "app", RequestedBy: "alice"})
	var rej *plan.RejectedError
	if !errors.As(err, &rej) || !strings.Contains(rej.Rejection.Diagnostics[0].Message, "has no snapshot ProxOps took (snapshots on PVE: before-upgrade, proxops-handmade") {
		t.Fatalf("rollback without own snapshots: %v", err)
	}
}

// A guest suspended after a rollback gets no operation: its drift from git is reported as a suspended
// finding with who rolled it back to what, and nothing is written, not even the retention's deletions of its
// snapshots. The other guests are planned as before.
func TestASuspendedGuestIsReportedNotCorrected(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	in := loadCase(t, "testdata/cases/snapshot-restart-protected-lvmthin").input
	in.Suspended = []plan.SuspendedGuest{{VMID: 100, Ref: "VM/app", Snapshot: "proxops-abc", By: "alice", At: at}}
	p, err := plan.Diff(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Operations) != 0 || len(p.Record) != 0 {
		t.Fatalf("a suspended guest got operations: %v", ids(p.Operations))
	}
	var found *plan.Finding
	for i := range p.Findings {
		if p.Findings[i].Kind == plan.FindingSuspended {
			found = &p.Findings[i]
		}
	}
	if found == nil || found.Ref != "VM/app" || found.VMID != 100 {
		t.Fatalf("no suspended finding of VM/app: %+v", p.Findings)
	}
	for _, want := range []string{"rolled back to proxops-abc by alice at 2026-03-04T05:06:07Z", "memory: 2048 → 4096", "proxops resume lab/app"} {
		if !strings.Contains(found.Message, want) {
			t.Errorf("the finding does not say %q: %s", want, found.Message)
		}
	}
	if text := render.PlanText(p); !strings.Contains(text, "suspended from correction") || render.Clean(p) {
		t.Errorf("diff does not show the suspended guest:\n%s", text)
	}

	retention := retentionCase(t)
	retention.Suspended = []plan.SuspendedGuest{{VMID: 100, Ref: "VM/app", Snapshot: "proxops-r4", By: "alice"}}
	p, err = plan.Diff(retention)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Operations) != 0 || len(p.Findings) == 0 || !strings.Contains(p.Findings[len(p.Findings)-1].Message, "no drift from git") {
		t.Fatalf("a suspended converged guest: operations %v, findings %+v", ids(p.Operations), p.Findings)
	}
}

// A suspended guest holds no plan back: the firewall lock-out check and the migration latch count only what
// the plan does.
func TestASuspendedGuestHoldsNoPlanBack(t *testing.T) {
	in := loadCase(t, "testdata/cases/firewall-lockout-held").input
	in.Suspended = []plan.SuspendedGuest{{VMID: 100, Ref: "VM/web", Snapshot: "proxops-abc", By: "alice"}}
	p, err := plan.Diff(in)
	if err != nil {
		t.Fatal(err)
	}
	if p.Held || len(p.Operations) != 0 {
		t.Fatalf("held %v (%s), operations %v", p.Held, p.HeldReason, ids(p.Operations))
	}

	in = loadCase(t, "testdata/cases/migrate-mass-held").input
	for vmid := 100; vmid <= 103; vmid++ {
		in.Suspended = append(in.Suspended, plan.SuspendedGuest{VMID: vmid, Ref: fmt.Sprintf("VM/app%d", vmid-100), Snapshot: "proxops-abc"})
	}
	p, err = plan.Diff(in)
	if err != nil {
		t.Fatal(err)
	}
	if p.Held {
		t.Fatalf("the migration latch holds moves of suspended guests: %s (operations %v)", p.HeldReason, ids(p.Operations))
	}
}
